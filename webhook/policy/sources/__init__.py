"""Where policies come from: YAML documents, files and directories re-read when they change,
and the reloader that combines every source into one immutable snapshot.

May import the `policy` core (model, compiler, snapshot), `policy.fields`, `policy.cel` and the layers below.
"""
