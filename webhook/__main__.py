"""`python -m webhook` is the same as the `placer` command."""

from webhook.commands.cli import main

raise SystemExit(main())
