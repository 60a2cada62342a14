"""What a node keeps on disk: records and their encoding, LevelDB with the digest index,
and the free-space reserve."""
