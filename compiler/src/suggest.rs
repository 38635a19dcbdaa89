//! "Did you mean ...?" suggestions.

/// Levenshtein distance, for short identifiers.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let n = name.chars().count();
    let limit = (n / 3).max(2).min(n.saturating_sub(1)).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, c)| d <= limit && c != name)
        .min_by_key(|&(d, c)| (d, c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("retrun", "return"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(closest("retrun", ["return", "call", "itrace"]), Some("return"));
        assert_eq!(closest("xyz", ["return", "call"]), None);
    }
}
