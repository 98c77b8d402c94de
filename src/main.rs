fn main() {
    let cli = match llmreplay::cli::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(exit) => {
            if exit.to_stdout {
                print!("{}", exit.message);
            } else {
                eprint!("{}", exit.message);
            }
            std::process::exit(exit.code);
        }
    };
    llmreplay::temporary_files_beside_outputs(&cli);
    let code = llmreplay::run(cli).unwrap_or_else(|e| {
        let said = e.to_string();
        let said = llmreplay::secrets::redact(&said);
        eprintln!("error: {}", llmreplay::printable::printable_lines(&said));
        e.exit_code()
    });
    std::process::exit(code);
}
