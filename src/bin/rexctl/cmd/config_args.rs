//! Settings on the command line: every command that touches a job
//! flattens the library's [`ConfigLayer`] (each setting a flag, its
//! `REX_*` variable read by clap), and [`Settings::load`] lays the
//! configuration files under it, `--config` (global, `REX_CONFIG`) naming
//! the one file that replaces the default ones. See `rex.toml(5)`.

use std::path::PathBuf;
use std::sync::OnceLock;

use rexctl::control::config::{Config, ConfigLayer, Origins, required_path};
use rexctl::store::Store;
use rexctl::store::settings::StoreSettings;

/// The configuration file named by the global `--config` (or
/// `REX_CONFIG`), set once by `main` before a command runs.
pub static CONFIG_FILE: OnceLock<Option<PathBuf>> = OnceLock::new();

/// The settings whose value clap took from their `REX_*` variable rather
/// than a flag, set once by `main` (so that a value error names the
/// variable, not a flag the user never typed).
pub static FROM_ENV: OnceLock<Vec<String>> = OnceLock::new();

/// The merged settings of one command: flags and `REX_*` variables over
/// the `AWS_*` variables over the configuration files.
pub struct Settings {
    /// The merged layer.
    pub layer: ConfigLayer,
    /// The configuration files read, highest precedence first.
    pub sources: Vec<PathBuf>,
    /// Where each setting was set, for value errors.
    pub origins: Origins,
}

impl Settings {
    /// Merges the command's flags (and `REX_*` variables) over the rest.
    pub fn load(flags: &ConfigLayer) -> rexctl::Result<Settings> {
        let file = CONFIG_FILE.get().cloned().flatten();
        let env = FROM_ENV.get().map(Vec::as_slice).unwrap_or_default();
        let loaded = ConfigLayer::load_over(flags.clone(), file.as_deref(), &|k| {
            env.iter().any(|e| e == k)
        })?;
        Ok(Settings {
            layer: loaded.layer,
            sources: loaded.sources,
            origins: loaded.origins,
        })
    }

    /// The L1 directory, which this command needs.
    pub fn l1(&self) -> rexctl::Result<PathBuf> {
        required_path("l1", self.layer.l1.clone()).map_err(|e| self.origins.annotate(e))
    }

    /// The L1 directory, for a command that reads it when it is set
    /// (restore, verify, gc): an empty one is refused as by [`Settings::l1`].
    pub fn opt_l1(&self) -> rexctl::Result<Option<PathBuf>> {
        self.layer.l1.clone().map(|_| self.l1()).transpose()
    }

    /// The L2 location, which this command needs.
    pub fn l2(&self) -> rexctl::Result<PathBuf> {
        required_path("l2", self.layer.l2.clone()).map_err(|e| self.origins.annotate(e))
    }

    /// How to reach the L2 store.
    pub fn store(&self) -> rexctl::Result<StoreSettings> {
        StoreSettings::resolve(&self.layer, |k| std::env::var(k).ok())
            .map_err(|e| self.origins.annotate(e))
    }

    /// The whole job's configuration (L1, L2, controller, push settings).
    pub fn config(self) -> rexctl::Result<Config> {
        let origins = self.origins;
        Config::resolve(self.layer, self.sources).map_err(|e| origins.annotate(e))
    }

    /// Opens the L2 store; with `create`, a missing directory is created
    /// (writing commands only).
    pub fn open_l2(&self, create: bool) -> rexctl::Result<Box<dyn Store>> {
        rexctl::store::open_l2(&self.l2()?, &self.store()?, create)
    }
}
