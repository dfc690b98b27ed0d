//! `celgate`: see the library's documentation (`celgate/src/lib.rs`).

/// mimalloc rather than the system allocator: the webhook allocates and frees a JSON tree per
/// review across worker threads, where glibc's malloc took a fifth of the request path's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    celgate::main()
}
