//! The one SQL text the store writes, made Postgres's: numbered `?N` parameters become `$N`
//! ([`dollar_params`]), leaving string literals, quoted identifiers and comments as they are.
//! The bottom of the storage kernel (`db.rs`); it imports nothing.

/// `sql` with every numbered parameter `?N` (N ≥ 1) outside a `'…'` string literal, a `"…"`
/// quoted identifier, a `-- …` line comment and a `/* … */` comment written as Postgres's
/// `$N`. The store's SQL numbers every parameter, because in SQLite a `$1` is a *named*
/// parameter bound by order of first appearance; so a bare `?`, a `?0` and a `$` outside
/// literals are refused (`Err` naming the byte offset) instead of being bound the wrong way
/// round on one of the two backends.
pub fn dollar_params(sql: &str) -> Result<String, String> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => i = quoted_end(b, i, q),
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n)
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2)
            }
            b'$' => return Err(format!("`$` at byte {i}: write parameters as ?N")),
            b'?' => {
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                let n = &sql[i + 1..i + 1 + digits];
                if digits == 0 || n.parse::<u32>().map_or(true, |n| n == 0) {
                    return Err(format!(
                        "`?` at byte {i} is not a numbered parameter ?1, ?2, …"
                    ));
                }
                out.push_str(&sql[copied..i]);
                out.push('$');
                out.push_str(n);
                i += 1 + digits;
                copied = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// The index just past the literal or identifier opened by quote `q` at `start` (a doubled
/// quote inside it is an escaped quote); the end of the text when it is not closed.
fn quoted_end(b: &[u8], start: usize, q: u8) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}
