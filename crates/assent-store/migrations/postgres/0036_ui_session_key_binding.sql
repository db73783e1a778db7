-- assent store schema: a dashboard session started with an operator key is bound to that key
-- (key_binding: 64 hex digits, a SHA-256 over the key's digest under a tag of its own, made
-- by the server), and the row's seal covers the binding. Before, a session held only its
-- operator's name: a key rotated by editing the file and restarting, or a principal removed
-- and later added again under the same name, left a stolen cookie signing in until the
-- session ended. A session whose binding is not its principal's current key's is no session.
-- Rows sealed before this migration no longer hold their seal: everyone signs in again once.
ALTER TABLE ui_sessions ADD COLUMN key_binding TEXT NOT NULL DEFAULT '';
