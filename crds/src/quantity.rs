use crate::CrdsError;

/// Parses a Kubernetes resource quantity used for byte sizes ("256Mi", "1G",
/// "1048576") into bytes. Only the suffixes that make sense for memory are
/// accepted; anything else is an error naming `field`.
pub fn parse_quantity_bytes(field: &str, value: &str) -> Result<u64, CrdsError> {
    let value = value.trim();
    let split = value.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(value.len());
    let (number, suffix) = value.split_at(split);
    let multiplier: u64 = match suffix {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        other => {
            return Err(CrdsError::invalid(
                field,
                format!("unknown quantity suffix {other:?} in {value:?} (use Ki, Mi, Gi, K, M or G)"),
            ));
        }
    };
    let parsed: f64 =
        number.parse().map_err(|_| CrdsError::invalid(field, format!("{value:?} is not a quantity such as 256Mi")))?;
    if !parsed.is_finite() || parsed < 0.0 {
        return Err(CrdsError::invalid(field, format!("{value:?} must be a non-negative quantity")));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    Ok((parsed * multiplier as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_suffixes() {
        assert_eq!(parse_quantity_bytes("f", "256Mi").ok(), Some(256 << 20));
        assert_eq!(parse_quantity_bytes("f", "1G").ok(), Some(1_000_000_000));
        assert_eq!(parse_quantity_bytes("f", "1.5Ki").ok(), Some(1536));
        assert_eq!(parse_quantity_bytes("f", "4096").ok(), Some(4096));
    }

    #[test]
    fn rejects_garbage_with_the_field_name() {
        let err = parse_quantity_bytes("spec.engine.stateMemoryLimit", "12 apples").unwrap_err().to_string();
        assert!(err.contains("spec.engine.stateMemoryLimit"), "{err}");
        assert!(parse_quantity_bytes("f", "Mi").is_err());
    }
}
