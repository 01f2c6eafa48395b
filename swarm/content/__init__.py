"""What a content is: its manifest and merkle hashing (pure; the origin-side plugin's only import)."""
