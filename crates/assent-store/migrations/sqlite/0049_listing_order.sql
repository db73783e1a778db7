-- assent store schema: the grant and tool-review listings are paged newest first
-- (`ORDER BY created_at DESC, rowid DESC` / `seen_at DESC, rowid DESC` with a keyset cursor);
-- without an index each page scanned the whole table and sorted it, so reading a long history
-- page by page cost its length squared (found by review). SQLite keeps the rowid at the end
-- of every index entry, so one column gives the order.
CREATE INDEX grants_created ON grants(created_at);
CREATE INDEX tool_reviews_seen ON tool_reviews(seen_at);
