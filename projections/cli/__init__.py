"""CLI commands that live in the projections layer; each module registers on ``eventstore.cli.cli``
when ``eventstore.cli.COMMANDS`` says one of its commands is invoked."""
