//! `verdicts KIND FILE…`: the verdict of one parser on each file, a line
//! `<file name>\t<verdict>` each, for `cargo xtask fuzz`'s differential check
//! against Go's `bcd-fixtures verdicts`.

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().expect("usage: verdicts KIND FILE…");
    for path in args {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let name = std::path::Path::new(&path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(path);
        println!("{name}\t{}", bcd_fuzz::verdict(&kind, &data));
    }
}
