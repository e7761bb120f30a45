//! `qosd completion bash|zsh|fish` and `qosd man`: shell completions and
//! the man page, generated from the CLI definition itself (so they never
//! disagree with the flags).

use clap::CommandFactory;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, clap::Args)]
#[command(long_about = "Print a shell completion script.\n\n\
bash: qosd completion bash > /etc/bash_completion.d/qosd\n\
zsh:  qosd completion zsh > \"${fpath[1]}/_qosd\"\n\
fish: qosd completion fish > ~/.config/fish/completions/qosd.fish")]
pub(crate) struct Args {
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::Cli::command(), "qosd", &mut out);
    crate::cli::output::write_stdout(out)?;
    Ok(0)
}

/// The man page (roff) of `qosd` with every subcommand's flags.
pub(crate) fn man_page() -> anyhow::Result<Vec<u8>> {
    let cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    // One page: the subcommands' own sections follow the main page.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name: &'static str = Box::leak(format!("qosd-{}", sub.get_name()).into_boxed_str());
        let sub = sub.clone().name(name);
        let mut part = Vec::new();
        let man = clap_mangen::Man::new(sub);
        man.render_name_section(&mut part)?;
        man.render_synopsis_section(&mut part)?;
        man.render_description_section(&mut part)?;
        man.render_options_section(&mut part)?;
        out.extend_from_slice(&part);
    }
    Ok(out)
}

pub(crate) fn run_man(_: ManArgs) -> anyhow::Result<i32> {
    let page = man_page()?;
    crate::cli::output::write_stdout(page)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_and_man_name_every_subcommand() {
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut crate::cli::Cli::command(),
            "qosd",
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        for sub in [
            "plan",
            "classify",
            "pods",
            "run",
            "eviction-order",
            "status",
        ] {
            assert!(bash.contains(sub), "bash completion lacks {sub}");
            assert!(
                man.contains(&format!("qosd\\-{}", sub.replace('-', "\\-"))),
                "man page lacks {sub}"
            );
        }
        assert!(bash.contains("--runtime-endpoint"));
        assert!(man.contains("runtime\\-endpoint"));
    }
}
