"""What a content is: its manifest and merkle hashing, and how people write its sizes (pure; the origin-side
plugin's only import)."""
