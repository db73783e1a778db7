//! What a JSON value weighs (issue 10's bounds): its compact text's length ([`json_len`])
//! and an estimate of the memory it holds once parsed ([`json_weight`], [`raw_weight`] of a
//! text not parsed yet), for bounding what is held by its size.

use std::cell::Cell;

/// The length of `v` as compact JSON text (serde_json's), in bytes, counted without building
/// the text; 0 for a value that does not serialise. Used to bound what is held by its size
/// (a learning-export page).
pub fn json_len(v: &impl serde::Serialize) -> usize {
    tally(v).map_or(0, |t| t.bytes.get())
}

/// Bytes charged for each piece of a JSON value by [`json_weight`] and [`raw_weight`]: a
/// scalar, a string (however many escapes it holds), a bracket, a comma or a colon. A parsed
/// `serde_json::Value` is 32 bytes however short its text, so `[0,0,…]` weighs 66 bytes an
/// element (its value and its comma), which also covers the slack of a `Vec` grown by
/// doubling (at most 64 bytes an element).
pub const PIECE: usize = 32;

/// Bytes charged for each non-empty JSON object on top of its pieces: the first entry of a
/// `serde_json::Map` (a `BTreeMap<String, Value>`: serde_json's `preserve_order` is off in
/// this workspace) allocates a whole B-tree leaf, room for 11 entries: 11 × 24 (keys) +
/// 11 × 32 (values) + its parent pointer and two `u16` lengths = 628, 632 aligned; measured
/// with a counting allocator (`crates/assent-core/tests/weight.rs`), which holds this figure
/// to what `{"":0}` allocates. `std::mem::size_of` cannot see the node. Later nodes (a leaf
/// holds at least 5 entries, an internal node 728 bytes for 6 or more children) stay under
/// the 4 pieces each entry is charged (key, colon, value, comma).
pub const OBJECT_NODE: usize = 632;

/// Bytes charged for each non-empty JSON array on top of its pieces: serde_json pushes its
/// values into a `Vec` whose first growth makes room for 4 (4 × 32), so `[[[0]]]` holds
/// 128 bytes a level where its pieces (`[` and `]`) weigh 66. Later growth (doubling, at most
/// 64 bytes a value) stays under the value and comma each element is charged.
pub const ARRAY_START: usize = 128;

/// An estimate of the memory `v` holds once parsed, in bytes, never below what
/// `serde_json::from_str::<Value>` keeps of its compact text: the text's length, plus
/// [`PIECE`] for each piece serde_json writes (a string, escapes and all, is one piece: parsed
/// it is one allocation of its bytes), plus [`OBJECT_NODE`] for each non-empty object and
/// [`ARRAY_START`] for each non-empty array. So `[0,0,…]` weighs far more than its 2 bytes an
/// element, and a text full of `\"` and `\n` about its length. For bounding what is held (an
/// upstream's tool list, a relayed line), not for exact sizes; 0 for a value that does not
/// serialise.
pub fn json_weight(v: &impl serde::Serialize) -> usize {
    tally(v).map_or(0, |t| {
        let pieces = t.pieces.get().saturating_mul(PIECE);
        let nodes = t.objects.get().saturating_mul(OBJECT_NODE);
        let starts = t.arrays.get().saturating_mul(ARRAY_START);
        t.bytes
            .get()
            .saturating_add(pieces)
            .saturating_add(nodes)
            .saturating_add(starts)
    })
}

/// What serde_json writes for a value, counted: its bytes, its pieces (each write outside a
/// string's content, a string's opening quote included), its non-empty objects and arrays.
#[derive(Default)]
struct Tally {
    bytes: Cell<usize>,
    pieces: Cell<usize>,
    objects: Cell<usize>,
    arrays: Cell<usize>,
    /// Inside a string: its content and closing quote add bytes, not pieces.
    in_string: Cell<bool>,
}

/// The writer that counts into a [`Tally`] (a piece per write outside a string).
struct Counter<'a>(&'a Tally);

impl std::io::Write for Counter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let t = self.0;
        t.bytes.set(t.bytes.get().saturating_add(b.len()));
        if !t.in_string.get() {
            t.pieces.set(t.pieces.get().saturating_add(1));
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// serde_json's compact formatter, marking where a string starts and ends and counting the
/// objects and arrays with a first entry.
struct Marks<'a>(&'a Tally);

impl serde_json::ser::Formatter for Marks<'_> {
    fn begin_string<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"\"")?;
        self.0.in_string.set(true);
        Ok(())
    }
    fn end_string<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"\"")?;
        self.0.in_string.set(false);
        Ok(())
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            self.0.objects.set(self.0.objects.get().saturating_add(1));
            Ok(())
        } else {
            w.write_all(b",")
        }
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            self.0.arrays.set(self.0.arrays.get().saturating_add(1));
            Ok(())
        } else {
            w.write_all(b",")
        }
    }
}

/// `v` written by serde_json (compact), counted; `None` when it does not serialise.
fn tally(v: &impl serde::Serialize) -> Option<Tally> {
    let t = Tally::default();
    let mut ser = serde_json::Serializer::with_formatter(Counter(&t), Marks(&t));
    v.serialize(&mut ser).ok()?;
    Some(t)
}

/// About what [`json_weight`] gives for the value `text` parses to, computed from the text in
/// one pass without parsing it, and never below it for a JSON text: the text's bytes outside
/// whitespace, plus [`PIECE`] for each piece (a string with its escapes, a bracket, a comma, a
/// colon, a number or literal), plus [`OBJECT_NODE`] for each non-empty object and
/// [`ARRAY_START`] for each non-empty array. A string's escapes are never written longer than
/// they are read (`\u00e9` is written `é`); a number may be (`-0` as `-0.0`, `1e15` as
/// `1000000000000000.0`), so a number without an exponent is charged 2 bytes more, one with
/// an exponent at least the 24 bytes of the longest double serde_json writes. Within a few
/// percent of [`json_weight`] but for escapes written shorter and exponents; a text that is
/// not JSON weighs what its bytes and pieces do.
pub fn raw_weight(text: &[u8]) -> usize {
    let (mut bytes, mut pieces, mut objects, mut arrays) = (0usize, 0usize, 0usize, 0usize);
    let (mut in_str, mut escaped) = (false, false);
    // The bracket that would close an object or array just opened, empty so far.
    let mut opened = None;
    let mut scalar = Scalar::default();
    for &b in text {
        if in_str {
            bytes += 1;
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            bytes += scalar.end();
            continue;
        }
        match opened.take() {
            Some(close) if b == close => {}
            Some(b'}') => objects += 1,
            Some(_) => arrays += 1,
            None => {}
        }
        bytes += 1;
        match b {
            b'"' | b'{' | b'[' | b']' | b'}' | b',' | b':' => {
                bytes += scalar.end();
                pieces += 1;
                in_str = b == b'"';
                opened = match b {
                    b'{' => Some(b'}'),
                    b'[' => Some(b']'),
                    _ => None,
                };
            }
            _ => pieces += usize::from(scalar.push(b)),
        }
    }
    bytes += scalar.end();
    bytes
        .saturating_add(pieces.saturating_mul(PIECE))
        .saturating_add(objects.saturating_mul(OBJECT_NODE))
        .saturating_add(arrays.saturating_mul(ARRAY_START))
}

/// The number or literal [`raw_weight`] is reading: its length so far, whether it is a
/// number, and whether it has an exponent.
#[derive(Default)]
struct Scalar {
    len: usize,
    number: bool,
    exponent: bool,
}

impl Scalar {
    /// Reads byte `b` of a scalar; whether it starts one (a new piece).
    fn push(&mut self, b: u8) -> bool {
        let first = self.len == 0;
        if first {
            self.number = b == b'-' || b.is_ascii_digit();
        }
        self.exponent |= self.number && matches!(b, b'e' | b'E');
        self.len += 1;
        first
    }

    /// Ends the scalar being read (if any): the bytes serde_json may write beyond its text.
    fn end(&mut self) -> usize {
        let s = std::mem::take(self);
        match (s.len, s.number, s.exponent) {
            (0, ..) | (_, false, _) => 0,
            (_, true, false) => 2,
            (len, true, true) => 24usize.saturating_sub(len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `json_len` is the compact text's length exactly; `json_weight` adds 32 a piece, so a
    /// list of zeros weighs far more than its text.
    #[test]
    fn a_values_length_is_its_text_and_its_weight_counts_its_pieces() {
        let v = serde_json::json!({"a": [1, 2], "b": "xyz"});
        assert_eq!(json_len(&v), serde_json::to_string(&v).unwrap().len());
        let zeros = serde_json::Value::from(vec![0; 1000]);
        assert_eq!(json_len(&zeros), 2001);
        assert!(
            json_weight(&zeros) > 16 * json_len(&zeros),
            "{}",
            json_weight(&zeros)
        );
        // A string is one piece however many escapes it holds; a non-empty object adds its
        // B-tree leaf, a non-empty array its first 4 slots; a number 2 bytes unparsed.
        for (text, weight) in [(r#""a\"b\nc""#, 9 + 32), (r#"{"":0}"#, 6 + 5 * 32 + 632)]
            .into_iter()
            .chain([("[0]", 3 + 3 * 32 + 128), ("[[],{}]", 7 + 7 * 32 + 128)])
        {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(json_weight(&v), weight, "{text}");
            let number = usize::from(text.contains('0')) * 2;
            assert_eq!(raw_weight(text.as_bytes()), weight + number, "{text}");
        }
    }
}
