//! The servers' own view of a run: their Prometheus metrics, scraped while the run goes
//! ([`scraper`]), mapped to common names ([`families`]) and summarised per target
//! ([`summary`]).

pub mod families;
pub mod scraper;
pub mod summary;

pub use scraper::{ScrapeConfig, ScrapeTarget, Scraper, METRICS_FILE};
