//! (to be written)

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file and print the effective configuration.
    Check {
        /// Config file (YAML).
        file: std::path::PathBuf,
    },
}

pub fn run(_cmd: ConfigCommand) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
