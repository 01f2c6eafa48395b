"""The block engine's sans-I/O cores: every decision a call with `now` that returns actions."""
