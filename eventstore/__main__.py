"""``python -m eventstore``: the same as the ``evstore`` command."""

from eventstore.entry import main

main()
