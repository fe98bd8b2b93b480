//! What this binary is: version, git revision and branch, build date, rustc
//! version and platform, set at build time by `build.rs`. Shown by
//! `--version` and exported as `multiproc_exporter_build_info`.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (`unknown` without git).
pub const REVISION: &str = env!("MPE_REVISION");
/// The git branch the binary was built from (`unknown` without git).
pub const BRANCH: &str = env!("MPE_BRANCH");
/// When it was built (UTC, RFC 3339).
pub const BUILD_DATE: &str = env!("MPE_BUILD_DATE");
/// The rustc version that built it.
pub const RUSTC_VERSION: &str = env!("MPE_RUSTC_VERSION");
/// The target operating system (`linux`).
pub const OS: &str = env!("MPE_OS");
/// The target architecture (`x86_64`, `aarch64`).
pub const ARCH: &str = env!("MPE_ARCH");

/// `--version`'s text, in the Prometheus exporters' layout.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (branch: ",
    env!("MPE_BRANCH"),
    ", revision: ",
    env!("MPE_REVISION"),
    ")\n  build date:    ",
    env!("MPE_BUILD_DATE"),
    "\n  rustc version: ",
    env!("MPE_RUSTC_VERSION"),
    "\n  platform:      ",
    env!("MPE_OS"),
    "/",
    env!("MPE_ARCH"),
);

/// The labels of `multiproc_exporter_build_info`, in order.
pub fn labels() -> [(&'static str, &'static str); 7] {
    [
        ("version", VERSION),
        ("revision", REVISION),
        ("branch", BRANCH),
        ("build_date", BUILD_DATE),
        ("rustc_version", RUSTC_VERSION),
        ("os", OS),
        ("arch", ARCH),
    ]
}
