"""Errors of the origin-side plugin. A file that cannot be read or hashed is the server's own problem (local);
the plugin then publishes nothing for it and the response goes out as it would without the plugin."""


class PluginError(Exception):
    """Base of the plugin's errors."""


class NotPublishable(PluginError):
    """This representation gets no manifest (unreadable, changed while hashed, too large to index)."""
