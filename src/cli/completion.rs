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

/// The man page (roff) of `qosd`: one page (one NAME section), the
/// commands in a COMMANDS section with their synopsis and flags, no links
/// to per-command pages (none are installed), plain ASCII roff (other
/// characters as groff `\[uXXXX]` escapes), so `groff -man -ww` renders it
/// without a warning.
pub(crate) fn man_page() -> anyhow::Result<Vec<u8>> {
    let cmd = crate::cli::Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    out.extend_from_slice(b".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_command(&mut out, &["qosd"], sub)?;
    }
    man.render_version_section(&mut out)?;
    Ok(roff_ascii(&String::from_utf8_lossy(&out)).into_bytes())
}

/// `qosd <path> <sub>` as a subsection of COMMANDS: its synopsis, what it
/// does and its flags (sections of a page of its own, lowered one level),
/// then its own commands.
fn man_command(out: &mut Vec<u8>, path: &[&str], sub: &clap::Command) -> anyhow::Result<()> {
    if sub.get_name() == "help" {
        return Ok(());
    }
    let mut full: Vec<&str> = path.to_vec();
    full.push(sub.get_name());
    let title = full.join(" ");
    let name: &'static str = Box::leak(full.join(" ").into_boxed_str());
    let man = clap_mangen::Man::new(sub.clone().name(name).bin_name(name));
    out.extend_from_slice(format!(".SS \"{title}\"\n").as_bytes());
    let mut part = Vec::new();
    man.render_synopsis_section(&mut part)?;
    man.render_description_section(&mut part)?;
    man.render_options_section(&mut part)?;
    for line in String::from_utf8_lossy(&part).lines() {
        // Headings of a page of its own become bold paragraph labels.
        match line.strip_prefix(".SH ") {
            Some("SYNOPSIS") | Some("DESCRIPTION") => out.extend_from_slice(b".PP\n"),
            Some(h) => {
                out.extend_from_slice(format!(".PP\n\\fB{}\\fR\n", h.trim_matches('"')).as_bytes())
            }
            None => {
                out.extend_from_slice(line.as_bytes());
                out.push(b'\n');
            }
        }
    }
    for s in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
        let path: Vec<&str> = full.clone();
        man_command(out, &path, s)?;
    }
    Ok(())
}

/// Roff in ASCII: every other character as a groff `\[uXXXX]` escape.
fn roff_ascii(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            o.push(c);
        } else {
            o.push_str(&format!("\\[u{:04X}]", c as u32));
        }
    }
    o
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
                man.contains(&format!(".SS \"qosd {sub}\"")),
                "man page lacks {sub}"
            );
        }
        assert!(bash.contains("--runtime-endpoint"));
        assert!(man.contains("runtime\\-endpoint"));
        assert!(man.contains(".SS \"qosd config check\""), "nested commands");
    }

    /// One page: one NAME section, no links to per-command pages that are
    /// not installed, ASCII roff, and groff renders it without a warning.
    #[test]
    #[ignore = "needs root: groff (scripts/test installs it)"]
    fn the_man_page_is_one_page_groff_renders_cleanly() {
        crate::support::require_tools(&["groff"], "groff-base");
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        assert_eq!(man.matches(".SH NAME").count(), 1, "{man}");
        assert!(
            !man.contains("qosd\\-plan(1)"),
            "links to pages never generated"
        );
        assert!(man.is_ascii());
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("qosd.1");
        std::fs::write(&page, &man).unwrap();
        let out = std::process::Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.trim().is_empty(),
            "groff: {err}"
        );
    }
}
