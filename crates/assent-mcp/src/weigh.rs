//! A line weighed before it is parsed ([`raw_weight`]), and what is read of one too heavy to
//! parse ([`envelope`]). Found by review: both readers parsed each line (up to the 16 MiB line
//! bound) into a `serde_json::Value` before any bound was checked, and `[0,0,…]` parsed holds
//! some 33 times its text: one line of 16 MiB, from the client or the upstream, made the proxy
//! build half a gigabyte. Now a line whose weight passes [`MAX_LINE_WEIGHT`] (what the relay
//! may hold for one client's calls in flight) is never parsed whole: only its
//! `id` and whether it has a `method` are read (the rest skipped with serde's `IgnoredAny`,
//! which builds nothing), so that a request is answered with an error naming the bound, an
//! answer refused under its id, and anything else dropped with a warning; it is never
//! forwarded or gated.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The most a line may weigh ([`raw_weight`]) to be parsed: 64 MiB, the bound on the bytes
/// the stdio relay holds for a client's calls in flight (its `MAX_HELD_BYTES` is this), so
/// that no line makes the relay build more than it may hold.
pub(crate) const MAX_LINE_WEIGHT: usize = 64 << 20;

/// About what `assent_core::json::json_weight` gives for the value `text` parses to, computed from
/// the text in one pass without parsing it, and never below it for a JSON text: its bytes
/// outside whitespace, plus 32 for each piece (a string however many escapes it holds, a
/// number, a bracket, a comma, a colon), plus a B-tree node for each non-empty object and 4
/// value slots for each non-empty array (`assent_core::json::raw_weight`, beside the
/// `json_weight` it must track). A text that is not JSON weighs what its bytes and pieces
/// do, and is refused all the same.
pub(crate) fn raw_weight(text: &[u8]) -> usize {
    assent_core::json::raw_weight(text)
}

/// Why a line of `weight` was refused unparsed (the words of the error that answers it).
pub(crate) fn too_heavy(weight: usize) -> String {
    format!(
        "assent: a line weighing {weight} bytes parsed (its text, 32 bytes a value and a node an object or array) was refused unread: past the {} MiB bound on what the proxy holds for calls in flight",
        MAX_LINE_WEIGHT >> 20
    )
}

/// What is read of a line too heavy to parse: its `id` and whether it has a `method`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Envelope {
    /// The line's `id`.
    pub(crate) id: Id,
    /// Whether it has a `method` (not `null`): a request or a notification.
    pub(crate) method: bool,
}

/// A line's `id`, as [`envelope`] reads it.
#[derive(Debug, Default, PartialEq)]
pub(crate) enum Id {
    /// No `id`: a notification (or an answer under none).
    #[default]
    Absent,
    /// A string, a number or `null`: what an answer is sent under.
    Is(Value),
    /// Another value (an array, an object, a boolean): no id to answer under.
    Odd,
}

/// Reads `id` and `method` of the JSON object `text`, skipping every other value unbuilt
/// (serde's `IgnoredAny`); `None` when `text` is no JSON object, or names a key twice.
pub(crate) fn envelope(text: &[u8]) -> Option<Envelope> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let env = de.deserialize_map(EnvelopeVisitor).ok()?;
    de.end().ok()?;
    Some(env)
}

/// The longest id (a string's bytes) a line too heavy to parse is answered under, by the hub
/// and by the stdio proxy alike ([`answerable`]): 1 KiB. Found by review: each answer to an
/// upstream's request repeated its id whole, so an upstream that read nothing and sent 16 MiB
/// requests under 14 MiB ids had the hub hold some 930 MiB of answers for it; the stdio proxy
/// built and queued such answers under ids of any length too.
pub(crate) const MAX_ANSWER_ID: usize = 1 << 10;

/// The id a line too heavy to parse is answered (a request: it has a `method`) or refused (an
/// answer) under, and whether it is a request; `None` (logged) when it has no usable id
/// ([`Id::Is`]), or a string id longer than [`MAX_ANSWER_ID`] bytes on a request — or on an
/// answer too, with `bound_answers` (the hub's: its own ids to an upstream are short numbers,
/// so no longer one is open). The stdio proxy passes the client's ids through as they are and
/// takes an answer only under an id still open, so it refuses an answer under one of any
/// length (its client is waiting for it); the refusal goes to the client, never back.
pub(crate) fn answerable(line: &[u8], bound_answers: bool) -> Option<(Value, bool)> {
    let Some(Envelope {
        id: Id::Is(id),
        method,
    }) = envelope(line)
    else {
        return None;
    };
    if let Value::String(s) = &id
        && s.len() > MAX_ANSWER_ID
        && (method || bound_answers)
    {
        tracing::warn!(
            id_bytes = s.len(),
            max = MAX_ANSWER_ID,
            "dropped a line too heavy to parse: its id is too long to answer under"
        );
        return None;
    }
    if method && !answerable_id(&id) {
        tracing::warn!("dropped a request too heavy to parse: its id is no integer or string");
        return None;
    }
    Some((id, method))
}

/// Whether an upstream's request under `id` may be taken in and answered, by the hub and by
/// the stdio proxy alike: `null`, an integer, or a string of at most [`MAX_ANSWER_ID`] bytes
/// — never a longer string, a fraction, an array, an object or a boolean. Found by review:
/// the 1 KiB bound held only for lines too heavy to parse, so an upstream sent pings under
/// 16 MiB ids while reading its stdin slowly, each answer (repeating its id) waited for it
/// in the gateway, and the gateway ran out of memory; the stdio proxy kept such ids (and
/// objects of up to 64 MiB) for each of 10,000 open requests.
pub(crate) fn answerable_id(id: &Value) -> bool {
    match id {
        Value::Null => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        Value::String(s) => s.len() <= MAX_ANSWER_ID,
        _ => false,
    }
}

/// The UTF-8 byte order mark, `EF BB BF`: RFC 8259 §8.1 lets a parser ignore one leading a
/// JSON text, and rmcp's line transport does.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `text` without one leading UTF-8 byte order mark ([`BOM`]), as rmcp reads a line
/// (`try_parse_with_compatibility` strips one, and only one). Found by review: the hub read a
/// line's id with serde_json, which refuses a BOM, took the line for no request and passed
/// it on whole, and rmcp, stripping the BOM, answered a ping under an 8 MiB id: every reader
/// of an upstream's lines strips it first, so that what is judged is what is parsed.
pub(crate) fn without_bom(text: &[u8]) -> &[u8] {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// What a line within [`MAX_LINE_WEIGHT`] is to a reader about to pass it on
/// ([`upstream_line`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// A request (a `method` and an `id`) under this id, one [`answerable_id`] takes.
    Request(Value),
    /// A request under an id it does not take, or a text [`envelope`] cannot read (no JSON
    /// object, a key named twice, a byte order mark left on it): dropped (logged), never
    /// passed on to a reader past this one, which might read it otherwise.
    Unanswerable,
    /// An answer or a notification (a JSON object with no `method` or no `id`).
    Other,
}

/// What the upstream's line `text` is ([`Line`]), read for its id and method only
/// ([`envelope`]); an [`Line::Unanswerable`] one is logged. A text [`envelope`] cannot read is
/// [`Line::Unanswerable`], not [`Line::Other`] (fail closed): rmcp, which takes no batches,
/// parses nothing valid that `envelope` refuses once a leading BOM is gone ([`without_bom`]),
/// so nothing is lost; found by review, such a line was passed on unjudged.
pub(crate) fn upstream_line(text: &[u8]) -> Line {
    match envelope(text) {
        Some(Envelope {
            id: Id::Is(id),
            method: true,
        }) if answerable_id(&id) => Line::Request(id),
        Some(Envelope {
            id: Id::Is(_) | Id::Odd,
            method: true,
        }) => {
            tracing::warn!(
                max_id_bytes = MAX_ANSWER_ID,
                "dropped an upstream request: its id is no integer or string of at most 1 KiB"
            );
            Line::Unanswerable
        }
        Some(_) => Line::Other,
        None => {
            tracing::warn!("dropped an upstream line that is no JSON object read whole");
            Line::Unanswerable
        }
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut env = Envelope::default();
        let (mut seen_id, mut seen_method) = (false, false);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let seen = match key.as_ref() {
                "id" => {
                    env.id = map.next_value_seed(IdSeed)?;
                    &mut seen_id
                }
                "method" => {
                    env.method = map.next_value::<Option<IgnoredAny>>()?.is_some();
                    &mut seen_method
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                return Err(serde::de::Error::custom("a key named twice"));
            }
        }
        Ok(env)
    }
}

/// Reads an `id` value: a string, a number or `null` kept, anything else skipped unbuilt.
struct IdSeed;

impl<'de> serde::de::DeserializeSeed<'de> for IdSeed {
    type Value = Id;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Id, D::Error> {
        d.deserialize_any(IdVisitor)
    }
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an id")
    }
    fn visit_unit<E>(self) -> Result<Id, E> {
        Ok(Id::Is(Value::Null))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Id, E> {
        Ok(Id::Odd)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Id, E> {
        Ok(Id::Is(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Id, E> {
        Ok(Id::Is(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Id, E> {
        Ok(Id::Is(v.into()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Id, E> {
        Ok(Id::Is(v.into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Id, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Id::Odd)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Id, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Id::Odd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The raw weight follows `json_weight` of what the text parses to, never below it and
    /// within a few percent, for the shapes a line takes: zeros, strings with escapes,
    /// pretty-printed JSON as text (all `\"` and `\n`), nested objects, numbers (`-0` and
    /// `1e15` written longer), literals, and whitespace (not counted).
    #[test]
    fn a_lines_raw_weight_is_about_its_parsed_weight() {
        let zeros = format!("[{}0]", "0,".repeat(10_000));
        let pretty = serde_json::to_string_pretty(&json!({"a": {"b": [1, "c\td"]}, "e": "f"}))
            .unwrap()
            .repeat(1000);
        let text_of_json = json!({"content": [{"type": "text", "text": pretty}]}).to_string();
        let chain = format!("[{}0{}]", r#"{"":"#.repeat(100), "}".repeat(100));
        let texts = [
            zeros.as_str(),
            text_of_json.as_str(),
            chain.as_str(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[0,1,2],"s":"a\nb\"c","t":true,"n":null,"f":-1.5}}}"#,
            "{ \"a\" : [ 1 , 2 ] ,\n \"b\" : { } , \"c\" : [ ] , \"d\" : \"\" }",
            "[-0, 1e15, 1E+2, 0.5, -12.25, 9007199254740992, 1e21, -1.5e-7, 18446744073709551616]",
        ];
        for text in texts {
            let v: Value = serde_json::from_str(text).unwrap();
            let (raw, parsed) = (
                raw_weight(text.as_bytes()),
                assent_core::json::json_weight(&v),
            );
            assert!(
                raw >= parsed && raw <= parsed + parsed / 16 + 64,
                "{raw} for {parsed}: {text:.80}"
            );
        }
        assert!(raw_weight(zeros.as_bytes()) > 30 * zeros.len());
        // A text full of escapes weighs about its length, not 32 bytes an escape more.
        let raw = raw_weight(text_of_json.as_bytes());
        assert!(
            raw < 2 * text_of_json.len(),
            "{raw} for {}",
            text_of_json.len()
        );
    }

    /// Attack (memory): a line too heavy to parse is read for its id and method only; every
    /// shape of id is read or skipped, and a text that is no object, or names `id` twice,
    /// gives nothing.
    #[test]
    fn the_envelope_reads_id_and_method_only() {
        let zeros = format!("[{}0]", "0,".repeat(1000));
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{{"arguments":{{"z":{zeros}}}}}}}"#
        );
        let env = envelope(call.as_bytes()).unwrap();
        assert_eq!((env.id, env.method), (Id::Is(json!("big")), true));
        let answer = format!(r#"{{"result":{zeros},"id":7,"jsonrpc":"2.0"}}"#);
        let env = envelope(answer.as_bytes()).unwrap();
        assert_eq!((env.id, env.method), (Id::Is(json!(7)), false));
        let note = format!(r#"{{"method":"n","params":{zeros}}}"#);
        assert_eq!(envelope(note.as_bytes()).unwrap().id, Id::Absent);
        let odd = format!(r#"{{"id":{zeros},"method":"m"}}"#);
        assert_eq!(envelope(odd.as_bytes()).unwrap().id, Id::Odd);
        for bad in [zeros.as_str(), r#"{"id":1,"id":2}"#, r#"{"id":1"#, "{} {}"] {
            assert_eq!(envelope(bad.as_bytes()), None, "{bad}");
        }
    }

    /// Attack (memory): a line too heavy to parse is answered only under an id within
    /// [`MAX_ANSWER_ID`] when it is a request (the answer goes back to whoever sent it), and
    /// an answer under a longer one only where such an id may be open (`bound_answers`
    /// false: the stdio proxy's client ids).
    #[test]
    fn a_request_is_answered_only_under_an_id_within_1_kib() {
        let line = |id: &str, method: bool| {
            let m = if method { r#","method":"m""# } else { "" };
            format!(r#"{{"jsonrpc":"2.0","id":"{id}"{m}}}"#)
        };
        let (within, over) = ("a".repeat(MAX_ANSWER_ID), "a".repeat(MAX_ANSWER_ID + 1));
        for bound in [false, true] {
            let got = answerable(line(&within, true).as_bytes(), bound);
            assert_eq!(got, Some((json!(within), true)));
            assert_eq!(answerable(line(&over, true).as_bytes(), bound), None);
        }
        let got = answerable(line(&over, false).as_bytes(), false);
        assert_eq!(got, Some((json!(over), false)));
        assert_eq!(answerable(line(&over, false).as_bytes(), true), None);
        assert_eq!(answerable(br#"{"id":[1],"method":"m"}"#, false), None);
        assert_eq!(answerable(br#"{"id":1.5,"method":"m"}"#, false), None);
    }

    /// Attack (memory): an upstream's request is taken in only under `null`, an integer or a
    /// string of at most [`MAX_ANSWER_ID`] bytes; an answer or a notification is not judged.
    #[test]
    fn an_upstream_request_is_taken_only_under_a_short_id() {
        let within = format!(
            r#"{{"id":"{}","method":"ping"}}"#,
            "a".repeat(MAX_ANSWER_ID)
        );
        let over = format!(
            r#"{{"id":"{}","method":"ping"}}"#,
            "a".repeat(MAX_ANSWER_ID + 1)
        );
        let want = Line::Request(json!("a".repeat(MAX_ANSWER_ID)));
        assert_eq!(upstream_line(within.as_bytes()), want);
        assert_eq!(upstream_line(over.as_bytes()), Line::Unanswerable);
        for (ok, id) in [
            (r#"{"id":null,"method":"m"}"#, json!(null)),
            (r#"{"id":-3,"method":"m"}"#, json!(-3)),
        ] {
            assert_eq!(upstream_line(ok.as_bytes()), Line::Request(id), "{ok}");
        }
        for odd in [
            r#"{"id":{"a":1},"method":"m"}"#,
            r#"{"id":[1],"method":"m"}"#,
            r#"{"id":true,"method":"m"}"#,
            r#"{"id":0.5,"method":"m"}"#,
        ] {
            assert_eq!(upstream_line(odd.as_bytes()), Line::Unanswerable, "{odd}");
        }
        let answer = format!(
            r#"{{"id":"{}","result":{{}}}}"#,
            "a".repeat(MAX_ANSWER_ID + 1)
        );
        for other in [
            answer.as_str(),
            r#"{"method":"n"}"#,
            r#"{"id":1,"result":{}}"#,
        ] {
            assert_eq!(upstream_line(other.as_bytes()), Line::Other, "{other:.40}");
        }
    }

    /// Attack (memory, found by review): a request behind a UTF-8 byte order mark, which
    /// serde_json refuses and rmcp strips, under an id over 1 KiB. A line `envelope` cannot
    /// read is dropped, not passed on unjudged as an answer or a notification would be; with
    /// its BOM taken off ([`without_bom`], as every reader does first) it is judged as rmcp
    /// would parse it. Batches, other JSON values and text that is no JSON are dropped too.
    #[test]
    fn an_upstream_line_behind_a_byte_order_mark_is_never_passed_on_unjudged() {
        let over = format!(
            "\u{feff}{{\"jsonrpc\":\"2.0\",\"id\":\"{}\",\"method\":\"ping\"}}",
            "a".repeat(MAX_ANSWER_ID + 1)
        );
        assert!(over.as_bytes().starts_with(b"\xEF\xBB\xBF"));
        assert_eq!(upstream_line(over.as_bytes()), Line::Unanswerable);
        assert_eq!(
            upstream_line(without_bom(over.as_bytes())),
            Line::Unanswerable
        );
        let short = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"ping\"}";
        assert_eq!(upstream_line(short.as_bytes()), Line::Unanswerable);
        let stripped = without_bom(short.as_bytes());
        assert_eq!(upstream_line(stripped), Line::Request(json!("s")));
        // Only one BOM goes, as rmcp strips only one.
        let twice = format!("\u{feff}{short}");
        assert_eq!(
            upstream_line(without_bom(twice.as_bytes())),
            Line::Unanswerable
        );
        for bad in [
            "[1]",
            r#"[{"id":1,"method":"ping"}]"#,
            "nope",
            "\"s\"",
            r#"{"id":1,"id":2,"method":"m"}"#,
        ] {
            assert_eq!(upstream_line(bad.as_bytes()), Line::Unanswerable, "{bad}");
        }
    }
}
