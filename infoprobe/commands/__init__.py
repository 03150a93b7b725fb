"""One module per `infoprobe` subcommand; each exposes ``register(subparsers)``."""
