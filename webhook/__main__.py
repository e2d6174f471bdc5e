"""`python -m webhook` is the same as the `placer` command."""

from webhook.cli import main

raise SystemExit(main())
