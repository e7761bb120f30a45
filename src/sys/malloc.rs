//! The C allocator's settings the daemon chooses for itself.
//!
//! glibc gives each thread that meets a locked arena a new one (up to
//! 8 x cores), and every arena keeps its own free memory: with qosd's six
//! threads that was ~1 MiB of resident memory at idle for nothing (the
//! daemon allocates little, and rarely from two threads at once). `qosd
//! run` therefore asks for one arena at start (BENCHMARKS.md section 7,
//! "RSS below 16 MiB"), unless the operator chose a number: the
//! `MALLOC_ARENA_MAX` variable or a `glibc.malloc.arena_max` tunable in
//! `GLIBC_TUNABLES` wins.

/// The number of malloc arenas `qosd run` asks for.
pub(crate) const ARENAS: i32 = 1;

/// Whether the operator set the arena count (then qosd leaves it alone):
/// `malloc_arena_max` is `MALLOC_ARENA_MAX`, `tunables` `GLIBC_TUNABLES`.
pub(crate) fn operator_chose_arenas(
    malloc_arena_max: Option<&str>,
    tunables: Option<&str>,
) -> bool {
    malloc_arena_max.is_some_and(|v| !v.trim().is_empty())
        || tunables.is_some_and(|t| {
            t.split(':')
                .any(|kv| kv.split('=').next() == Some("glibc.malloc.arena_max"))
        })
}

/// Limit glibc's malloc to [`ARENAS`] arenas, unless the operator chose a
/// number (see [`operator_chose_arenas`]). Call before threads start.
/// Returns the count set, or `None` when nothing was changed (the
/// operator's choice, or a C library without `mallopt`).
pub(crate) fn limit_arenas() -> Option<i32> {
    let env = |k| std::env::var(k).ok();
    if operator_chose_arenas(
        env("MALLOC_ARENA_MAX").as_deref(),
        env("GLIBC_TUNABLES").as_deref(),
    ) {
        return None;
    }
    set_arena_max(ARENAS)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(n: i32) -> Option<i32> {
    // SAFETY: mallopt only changes the allocator's parameters; glibc takes
    // its own lock for it.
    let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, n) } == 1;
    ok.then_some(n)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_n: i32) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_arena_count_wins() {
        for (max, tun, chose) in [
            (None, None, false),
            (Some(""), None, false),
            (Some("2"), None, true),
            (None, Some("glibc.malloc.arena_max=4"), true),
            (
                None,
                Some("glibc.malloc.trim_threshold=65536:glibc.malloc.arena_max=2"),
                true,
            ),
            (None, Some("glibc.malloc.arena_test=2"), false),
            (None, Some("glibc.malloc.trim_threshold=65536"), false),
        ] {
            assert_eq!(operator_chose_arenas(max, tun), chose, "{max:?} {tun:?}");
        }
    }
}
