fn main() {
    std::process::exit(qosd::cli::main());
}
