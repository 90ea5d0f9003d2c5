//! The optional capabilities at each `HELLO` (CAPABILITIES.md §2): the
//! dependency checks that run before every handshake — the desktop probe,
//! the model list of the local LLM, the devices — and what one connection
//! keeps of them (the sticky feature lists and window ids, the cached model
//! list).
//!
//! A check runs only when its local switch is on, so a switched-off
//! feature is never touched, and a check that fails only leaves its
//! capability out: it never fails the handshake.

use std::sync::Arc;

use super::handshake::{self, ConnectionKind, Gates, Probes};
use crate::desktop::{ConnectionDesktop, Desktop};
use crate::hardware::{self, Roots};
use crate::llm::LocalLlm;
use crate::log::Log;
use crate::protocol::Capability;

const COMPONENT: &str = "daemon";

/// The machine-wide services behind the optional capabilities, and the
/// switches.
#[derive(Debug, Clone, Default)]
pub struct Optional {
    /// The switches (their dependency flags are set at each HELLO).
    pub gates: Gates,
    /// The desktop, when computer use is switched on.
    pub desktop: Option<Arc<Desktop>>,
    /// The local LLM, when it is switched on.
    pub llm: Option<Arc<LocalLlm>>,
    /// Where devices are looked for, when hardware discovery is switched on.
    pub hardware: Option<Roots>,
}

/// What one connection found at its HELLO and keeps for its requests.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// The desktop as probed, when computer use is switched on.
    pub desktop: Option<Arc<ConnectionDesktop>>,
    /// The local LLM and the models advertised, when it is switched on.
    pub llm: Option<ConnectionLlm>,
}

/// The local LLM as one connection's HELLO found it.
#[derive(Debug, Clone)]
pub struct ConnectionLlm {
    pub llm: Arc<LocalLlm>,
    /// `HELLO.local_llm_models`, the list requests are checked against.
    pub models: Vec<String>,
}

/// What a HELLO advertises.
#[derive(Debug, Clone, Default)]
pub struct Advertisement {
    pub capabilities: Vec<Capability>,
    pub probes: Probes,
}

impl Optional {
    /// Runs the checks for one HELLO of a connection of `kind`; a failed
    /// check is logged with its reason.
    pub fn probe(&self, kind: &ConnectionKind, log: &Log) -> (Advertisement, Found) {
        let mut gates = self.gates;
        let mut probes = Probes::default();
        let mut found = Found::default();
        if let Some(desktop) = &self.desktop {
            let connection = Arc::new(ConnectionDesktop::probe_for_hello(desktop));
            let probe = connection.probe();
            match &probe.unavailable_because {
                None if probe.available => {
                    gates.computer_use_backend = true;
                    probes.screen_resolution = probe.screen_resolution;
                    probes.computer_use_features = probe.features.clone();
                    probes.computer_use_features_coarse = probe.coarse.clone();
                }
                why => log.warn(
                    COMPONENT,
                    format!(
                        "computer use is not offered: {}",
                        why.as_deref().unwrap_or("the desktop probe failed")
                    ),
                ),
            }
            found.desktop = Some(connection);
        }
        if let Some(llm) = &self.llm {
            let models = match llm.models() {
                Ok(models) => models,
                Err(why) => {
                    log.warn(
                        COMPONENT,
                        format!("the local LLM is not offered: {} ({why})", llm.url()),
                    );
                    Vec::new()
                }
            };
            gates.local_llm_models_found = !models.is_empty();
            probes.local_llm_models = models.clone();
            found.llm = Some(ConnectionLlm {
                llm: Arc::clone(llm),
                models,
            });
        }
        if let Some(roots) = &self.hardware {
            let support = hardware::support(roots);
            gates.serial_support = support.serial;
            gates.usb_support = support.usb;
            gates.gpio_support = support.gpio;
            probes.hardware_devices = hardware::discover(roots);
        }
        let advertisement = Advertisement {
            capabilities: handshake::advertised_capabilities(&gates, kind),
            probes,
        };
        (advertisement, found)
    }
}
