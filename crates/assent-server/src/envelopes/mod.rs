//! The wire formats of the events the store writes: [`WireEnvelopes`], the store's
//! [`Envelopes`] renderer, building AAEP event envelopes ([`aaep`](mod@aaep)) and MPLP Confirm
//! trace events ([`mplp`]) from the typed events the store reports. The store calls it inside
//! the transaction of the state change, so the rendered event is stored with it; nothing here
//! touches the store.

pub mod aaep;
pub mod mplp;

pub use aaep::{AAEP_VERSION, ASSENT_CONTEXT, CONTEXT};

use assent_store::{AaepEvent, Envelopes, MplpEvent};
use serde_json::Value;

/// The gateway's event renderer: AAEP 1.0.0 envelopes and MPLP v1.0 trace events, exactly as
/// served and stored. Pass it to `assent_store::Store::open` (`Arc::new(WireEnvelopes)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WireEnvelopes;

impl Envelopes for WireEnvelopes {
    fn aaep(&self, e: &AaepEvent<'_>) -> Value {
        aaep::render(e)
    }

    fn mplp(&self, e: &MplpEvent<'_>) -> Value {
        mplp::render(e)
    }
}
