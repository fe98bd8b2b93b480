//! The `multiproc-exporter` binary: a thin wrapper around [`multiproc_exporter::cli`].
#![deny(unsafe_code)]

fn main() -> std::process::ExitCode {
    multiproc_exporter::cli::main()
}
