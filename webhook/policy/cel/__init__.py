"""CEL for policies: the environment with Kubernetes' libraries (`environment`, `libraries/`), the
checked AST and what it reads (`checked_ast`, `ast_paths`, `field_reads`), cost limits, stepwise evaluation
for explanations, and runtime errors as users see them.

May import support and pods only (the bottom of `policy`).
"""
