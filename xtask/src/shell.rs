//! Quoting words for a POSIX shell: plan files and the commands echoed
//! before they run are bash that a reader can paste.

/// Quotes a string for a POSIX shell (only when it needs quoting).
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Quotes and joins words into one shell command line.
pub(crate) fn shell_join<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    words
        .into_iter()
        .map(|w| shell_quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn quoting_round_trips_through_sh() {
        let words = ["plain", "with space", "it's", "", "$HOME", "a\"b", "--x=1"];
        let line = shell_join(words);
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("for w in {line}; do printf '[%s]' \"$w\"; done"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "[plain][with space][it's][][$HOME][a\"b][--x=1]"
        );
        assert_eq!(shell_quote("--x=1"), "--x=1");
    }
}
