"""What a content is: its manifest and merkle hashing, its BitTorrent v2 torrent, and how people write its sizes
(pure; the origin-side plugin's only import)."""
