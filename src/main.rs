use clap::Parser;

fn main() {
    let cli = llmreplay::cli::Cli::parse();
    if let Err(e) = llmreplay::run(cli) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}
