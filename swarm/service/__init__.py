"""The asyncio shells: a node that fetches and serves, and the service that runs a content's life."""
