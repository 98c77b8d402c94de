use clap::Parser;

fn main() {
    let cli = llmreplay::cli::Cli::parse();
    let code = llmreplay::run(cli).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        e.exit_code()
    });
    std::process::exit(code);
}
