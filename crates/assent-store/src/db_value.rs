//! The storage kernel's own values, shared by both backends: a statement's parameters
//! ([`Value`], [`ToValue`], [`Params`]), a column as stored ([`ValueRef`], [`FromValue`]), the
//! kernel's error ([`DbError`]) and what a write changed ([`Change`]). No backend code: the
//! rusqlite glue is `db_sqlite.rs`, the Postgres glue `db_pg.rs`.

/// A statement parameter. `Bool` binds as 0/1 on SQLite and as `BOOLEAN` on Postgres; `Int`
/// binds as `BIGINT` (or `INTEGER`/`SMALLINT` when Postgres infers those and it fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (times in Unix ms, counts, sequence numbers).
    Int(i64),
    /// UTF-8 text (ids, names, JSON).
    Text(&'a str),
    /// A boolean.
    Bool(bool),
}

/// A Rust value that binds as one statement parameter.
pub trait ToValue {
    /// The parameter; `Err` when it cannot be represented (a `u64` or `usize` over `i64::MAX`).
    fn to_value(&self) -> Result<Value<'_>, DbError>;
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        self.as_ref().map_or(Ok(Value::Null), |v| v.to_value())
    }
}
impl ToValue for Value<'_> {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        Ok(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Text(self))
    }
}
impl ToValue for String {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Text(self))
    }
}
impl ToValue for bool {
    fn to_value(&self) -> Result<Value<'_>, DbError> {
        Ok(Value::Bool(*self))
    }
}
macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Result<Value<'_>, DbError> {
                i64::try_from(*self).map(Value::Int).map_err(|_| DbError::Bind(format!(
                    "{} does not fit a 64-bit signed integer", self
                )))
            }
        }
    )*};
}
int_to_value!(i64, i32, i16, u32, u16, u8, u64, usize);

/// A statement's parameters, in `?1, ?2, …` order: `params![a, b]`, an array `[a, b]` of one
/// type, `[]` for none, or a slice of `&dyn ToValue` for a list built at run time.
pub trait Params {
    /// The parameters as values; `Err` for one that cannot be represented.
    fn values(&self) -> Result<Vec<Value<'_>>, DbError>;
}

impl Params for [&dyn ToValue; 0] {
    fn values(&self) -> Result<Vec<Value<'_>>, DbError> {
        Ok(Vec::new())
    }
}
impl Params for &[&dyn ToValue] {
    fn values(&self) -> Result<Vec<Value<'_>>, DbError> {
        self.iter().map(|v| v.to_value()).collect()
    }
}
macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(&self) -> Result<Vec<Value<'_>>, DbError> {
                self.iter().map(|v| v.to_value()).collect()
            }
        }
    )*};
}
array_params!(
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48
);

/// A column as stored, whichever backend: what the strict reader (`stored.rs`) tells apart.
/// SQLite's REAL and BLOB, and every Postgres type but the integer, boolean and text ones,
/// are `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// SQL NULL.
    Null,
    /// An integer (SQLite INTEGER; Postgres INT2, INT4, INT8).
    Int(i64),
    /// A Postgres BOOLEAN (SQLite stores booleans as `Int` 0/1).
    Bool(bool),
    /// Text as stored, not checked for UTF-8 (SQLite TEXT; Postgres TEXT, VARCHAR, CHAR, NAME).
    Text(&'a [u8]),
    /// Anything else.
    Other,
}

/// A Rust value read from one column: `Err` says why the stored value is not one.
pub trait FromValue: Sized {
    /// The value, or why not (e.g. "expected an integer, found text").
    fn from_value(v: ValueRef<'_>) -> Result<Self, String>;
}

fn found(v: ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Int(_) => "an integer",
        ValueRef::Bool(_) => "a boolean",
        ValueRef::Text(_) => "text",
        ValueRef::Other => "another type",
    }
}

impl FromValue for i64 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Int(i) => Ok(i),
            v => Err(format!("expected an integer, found {}", found(v))),
        }
    }
}
macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
                let i = i64::from_value(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range for {}", stringify!($t)))
            }
        }
    )*};
}
int_from_value!(i32, u32, u64, usize);

impl FromValue for bool {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Bool(b) => Ok(b),
            ValueRef::Int(0) => Ok(false),
            ValueRef::Int(1) => Ok(true),
            v => Err(format!("expected a boolean, found {}", found(v))),
        }
    }
}
impl FromValue for String {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Text(b) => String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8".into()),
            v => Err(format!("expected text, found {}", found(v))),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// What a write changed, announced to other replicas at commit (Postgres NOTIFY on the
/// channel `assent:<schema>:<kind>`, payload the id or empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// An approval was created, decided, escalated or cancelled (its id).
    Approval(String),
    /// A clarification was asked, answered, expired or cancelled (its id).
    Clarification(String),
    /// A tool review was opened or decided (its id).
    Review(String),
    /// AAEP events or audit records were appended.
    Events,
    /// An AAEP subscription was opened or closed.
    Subscriptions,
}

impl Change {
    /// The channel's last part and the payload.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            Change::Approval(id) => ("approval", id),
            Change::Clarification(id) => ("clarification", id),
            Change::Review(id) => ("review", id),
            Change::Events => ("events", ""),
            Change::Subscriptions => ("subscriptions", ""),
        }
    }

    /// The change a channel's last part and payload name; `None` for an unknown kind.
    pub fn from_parts(kind: &str, payload: &str) -> Option<Change> {
        Some(match kind {
            "approval" => Change::Approval(payload.into()),
            "clarification" => Change::Clarification(payload.into()),
            "review" => Change::Review(payload.into()),
            "events" => Change::Events,
            "subscriptions" => Change::Subscriptions,
            _ => return None,
        })
    }

    /// Every kind's channel part, for LISTEN.
    pub const KINDS: [&'static str; 5] = [
        "approval",
        "clarification",
        "review",
        "events",
        "subscriptions",
    ];
}

/// The storage kernel's error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite failed (locked past the busy timeout, disk full, corrupt file, bad SQL).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// Postgres failed (unreachable, lock timeout, bad SQL, constraint). Shown with the
    /// server's own message and SQLSTATE ([`pg_text`]), not the driver's bare "db error".
    #[error("{}", pg_text(.0))]
    Postgres(#[from] postgres::Error),
    /// A query that must return a row returned none ([`OptionalExtension::optional`] makes
    /// it `None`).
    #[error("query returned no rows")]
    NoRows,
    /// A column could not be read as the type asked for.
    #[error("column {column}: {why}")]
    Column {
        /// The column's name or index.
        column: String,
        /// Why.
        why: String,
    },
    /// A parameter could not be bound, or an SQL text is not in the store's dialect.
    #[error("{0}")]
    Bind(String),
    /// The database is not one this kernel serves (encoding, missing schema, misuse).
    #[error("{0}")]
    Unusable(String),
}

impl DbError {
    /// Whether this is a stored value of another type than the gateway writes ([`Column`]:
    /// a real where it writes integers, a blob where it writes text — a row edited behind
    /// its back, which SQLite keeps as given). Readers that go over many rows (the expiry
    /// sweep, the listings, the seal check) skip such a row instead of failing for all.
    ///
    /// [`Column`]: DbError::Column
    pub fn is_damaged_row(&self) -> bool {
        matches!(self, DbError::Column { .. })
    }
}

/// A Postgres error as a log line can use: the server's severity, message and SQLSTATE for an
/// error the server sent (`ERROR: canceling statement due to lock timeout (55P03)`), else the
/// driver's text with its cause (`error connecting to server: Connection refused`).
pub fn pg_text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// `Err(NoRows)` as `Ok(None)`, as rusqlite's `OptionalExtension`.
pub trait OptionalExtension<T> {
    /// `Ok(Some(v))` for a row, `Ok(None)` for no row, `Err` for any other failure.
    fn optional(self) -> Result<Option<T>, DbError>;
}
impl<T> OptionalExtension<T> for Result<T, DbError> {
    fn optional(self) -> Result<Option<T>, DbError> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// An error a write transaction's closure returns: `keeps_writes` says whether what was
/// written before it still commits (a refusal that was audited), else it rolls back.
pub trait Settles: From<DbError> {
    /// `true` to commit the writes made before this error; default `false`.
    fn keeps_writes(&self) -> bool {
        false
    }
}
impl Settles for DbError {}
