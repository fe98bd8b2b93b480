//! Build information for `--version` and `multiproc_exporter_build_info`:
//! the git revision and branch (from `git`, or `MPE_BUILD_REVISION` and
//! `MPE_BUILD_BRANCH` when building without a `.git` directory, as in the
//! Docker build context; `unknown` otherwise), the build date (UTC, from
//! `SOURCE_DATE_EPOCH` when set, for reproducible builds), the rustc version
//! and the target platform. Hand-written (a few `git` calls) rather than the
//! `vergen` crates, whose dependencies would outweigh it.

use std::process::Command;

fn main() {
    let revision = from_env_or("MPE_BUILD_REVISION", &["rev-parse", "HEAD"]);
    let branch = from_env_or("MPE_BUILD_BRANCH", &["rev-parse", "--abbrev-ref", "HEAD"]);
    let date = build_date();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = run(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_else(|_| "unknown".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "unknown".into());
    for (key, value) in [
        ("MPE_REVISION", revision),
        ("MPE_BRANCH", branch),
        ("MPE_BUILD_DATE", date),
        ("MPE_RUSTC_VERSION", rustc_version),
        ("MPE_OS", os),
        ("MPE_ARCH", arch),
    ] {
        println!("cargo:rustc-env={key}={value}");
    }
    println!("cargo:rerun-if-env-changed=MPE_BUILD_REVISION");
    println!("cargo:rerun-if-env-changed=MPE_BUILD_BRANCH");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit or checkout changes HEAD or the ref it points to (found
    // through git, so that worktrees, whose .git is a file, work too).
    let mut watched = vec![run("git", &["rev-parse", "--git-path", "HEAD"])];
    watched.push(run("git", &["rev-parse", "--git-path", "packed-refs"]));
    if let Some(reference) = run("git", &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(run("git", &["rev-parse", "--git-path", &reference]));
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

fn from_env_or(variable: &str, git_args: &[&str]) -> String {
    std::env::var(variable)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| run("git", git_args))
        .unwrap_or_else(|| "unknown".into())
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// The build date as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn build_date() -> String {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}
