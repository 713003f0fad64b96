"""Event stores beyond memory: JSONL files, SQLite, PostgreSQL."""
