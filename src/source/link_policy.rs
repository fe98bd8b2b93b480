//! Which symbolic links in a metrics directory are followed.
//!
//! prometheus_client only ever writes regular files, so a symbolic link named
//! `*.db` in a metrics directory was put there by someone or something else.
//! Following it could make the exporter read (and, for a file that happens to
//! parse, publish) a file anywhere the exporter's user can read. By default
//! ([`LinkPolicy::InsideDirectory`]) a link is followed only when its target,
//! with every link on the way resolved (`realpath`), lies inside the same
//! metrics directory (also resolved); any other link is left out with the
//! reason [`SkipReason::LinkOutsideDirectory`]. `--dir.follow-links-outside`
//! ([`LinkPolicy::Anywhere`]) follows every link, as prometheus_client does.
//!
//! Only directory entries whose type (from `readdir`) is a symbolic link are
//! resolved, so a directory of regular files costs no extra system call. A
//! link that cannot be resolved (dangling, a loop, a component without search
//! permission) is passed on: opening it fails the same way and is reported
//! with that reason (`vanished`, `link_loop`, `permission_denied`). The check
//! and the open are separate system calls, so a link swapped in that window
//! can be followed once; the next collection checks it again. Files named
//! explicitly (`dump FILE`) are not directory entries and are always followed.
//!
//! [`LinkPolicy::NoLinks`] follows no link at all, not even one pointing
//! inside: the policy of directories read through another process's mount
//! namespace (`serve --discover.processes`, [`crate::source::discover`]),
//! where a link's absolute target would resolve in the exporter's file system,
//! not the writer's, and `realpath` cannot tell inside from outside. Every
//! link is left out with the reason [`SkipReason::LinkOutsideDirectory`], and
//! the reader opens files with `O_NOFOLLOW`, so a regular file swapped for a
//! link between the listing and the open is not followed either.

use std::path::{Path, PathBuf};

use crate::source::SkipReason;

/// Which symbolic links found in a metrics directory are followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LinkPolicy {
    /// Follow a link only when its resolved target is inside the metrics
    /// directory (the default).
    #[default]
    InsideDirectory,
    /// Follow every link, wherever it points (prometheus_client's behaviour).
    Anywhere,
    /// Follow no link (directories of other mount namespaces).
    NoLinks,
}

/// Checks the symbolic links of one directory listing against a policy;
/// resolves the directory itself at most once.
#[derive(Debug)]
pub(crate) struct LinkCheck<'a> {
    dir: &'a Path,
    policy: LinkPolicy,
    /// The resolved directory, once needed (`None` inside: it cannot be resolved).
    resolved_dir: Option<Option<PathBuf>>,
}

impl<'a> LinkCheck<'a> {
    /// A check for the entries of `dir`.
    pub(crate) fn new(dir: &'a Path, policy: LinkPolicy) -> Self {
        Self {
            dir,
            policy,
            resolved_dir: None,
        }
    }

    /// `Err` if `link`, a symbolic link listed in the directory, must not be
    /// followed.
    pub(crate) fn check(&mut self, link: &Path) -> Result<(), SkipReason> {
        match self.policy {
            LinkPolicy::Anywhere => return Ok(()),
            LinkPolicy::NoLinks => return Err(SkipReason::LinkOutsideDirectory),
            LinkPolicy::InsideDirectory => {}
        }
        // Unresolvable: the read fails the same way and reports why.
        let Ok(target) = std::fs::canonicalize(link) else {
            return Ok(());
        };
        let dir = self.dir;
        let resolved_dir = self
            .resolved_dir
            .get_or_insert_with(|| std::fs::canonicalize(dir).ok());
        match resolved_dir.as_deref() {
            Some(dir) if target.starts_with(dir) => Ok(()),
            // The directory cannot be resolved (deleted this instant): follow nothing.
            _ => Err(SkipReason::LinkOutsideDirectory),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_links_resolving_inside_the_directory_are_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("metrics");
        let sibling = tmp.path().join("metrics-other");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::create_dir(&sibling).unwrap();
        std::fs::write(dir.join("sub/data"), b"").unwrap();
        std::fs::write(sibling.join("data"), b"").unwrap();
        symlink("sub/data", dir.join("relative.db")).unwrap();
        symlink(dir.join("sub/data"), dir.join("absolute.db")).unwrap();
        symlink("../metrics-other/data", dir.join("sibling.db")).unwrap();
        symlink("/dev/null", dir.join("device.db")).unwrap();
        // Inside only through another link that leaves and comes back.
        symlink(&dir, sibling.join("back")).unwrap();
        symlink("../metrics-other/back/sub/data", dir.join("round_trip.db")).unwrap();
        symlink("missing", dir.join("dangling.db")).unwrap();
        symlink("loop.db", dir.join("loop.db")).unwrap();

        // The directory itself reached through a link.
        let via_link = tmp.path().join("link-to-metrics");
        symlink(&dir, &via_link).unwrap();
        for listed in [&dir, &via_link] {
            let mut check = LinkCheck::new(listed, LinkPolicy::InsideDirectory);
            for inside in ["relative.db", "absolute.db", "round_trip.db"] {
                assert_eq!(check.check(&listed.join(inside)), Ok(()), "{inside}");
            }
            for outside in ["sibling.db", "device.db"] {
                assert_eq!(
                    check.check(&listed.join(outside)),
                    Err(SkipReason::LinkOutsideDirectory),
                    "{outside}"
                );
            }
            // Left to the read, which reports them as vanished and link_loop.
            assert_eq!(check.check(&listed.join("dangling.db")), Ok(()));
            assert_eq!(check.check(&listed.join("loop.db")), Ok(()));
        }
        let mut anywhere = LinkCheck::new(&dir, LinkPolicy::Anywhere);
        assert_eq!(anywhere.check(&dir.join("sibling.db")), Ok(()));
        assert_eq!(anywhere.check(&dir.join("device.db")), Ok(()));
        let mut none = LinkCheck::new(&dir, LinkPolicy::NoLinks);
        for any in ["relative.db", "absolute.db", "sibling.db", "dangling.db"] {
            assert_eq!(
                none.check(&dir.join(any)),
                Err(SkipReason::LinkOutsideDirectory),
                "{any}"
            );
        }
    }
}
