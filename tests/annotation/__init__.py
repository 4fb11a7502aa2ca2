"""The annotation back end ``gpsl.annotation``: the store on SQLite and PostgreSQL, its services
and the training worker."""
