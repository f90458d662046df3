//! Values with units as a plan writes them: durations, ranges of durations and counts, sizes.

use super::*;

/// A duration written the way people write them: "500ms", "2s", "1m30s", or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        dur_of(&v).map(Dur).map_err(D::Error::custom)
    }
}

pub(super) fn dur_of(v: &toml::Value) -> Result<Duration, String> {
    match v {
        toml::Value::String(s) => crate::units::parse_duration(s).map_err(|e| {
            if e.contains("write it like") {
                e
            } else {
                format!("{e} (a duration)")
            }
        }),
        toml::Value::Integer(n) if *n >= 0 => Ok(Duration::from_secs(*n as u64)),
        toml::Value::Float(f) if f.is_finite() && *f >= 0.0 => Ok(Duration::from_secs_f64(*f)),
        other => Err(format!(
            "{other} is not a duration; write it like \"500ms\", \"2s\" or \"1m30s\""
        )),
    }
}

/// A range to draw from: `["50ms", "400ms"]`, or one value for a fixed one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurRange {
    pub min: Duration,
    pub max: Duration,
}

impl<'de> Deserialize<'de> for DurRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        let (min, max) = match &v {
            toml::Value::Array(a) if a.len() == 2 => (
                dur_of(&a[0]).map_err(D::Error::custom)?,
                dur_of(&a[1]).map_err(D::Error::custom)?,
            ),
            toml::Value::Array(_) => {
                return Err(D::Error::custom(
                    "a range is two durations [min, max], e.g. [\"50ms\", \"400ms\"]",
                ))
            }
            one => {
                let x = dur_of(one).map_err(D::Error::custom)?;
                (x, x)
            }
        };
        if min > max {
            return Err(D::Error::custom(format!(
                "the range starts above its end ({} > {}); write it as [min, max]",
                crate::journal::secs(min.as_secs_f64()),
                crate::journal::secs(max.as_secs_f64())
            )));
        }
        Ok(DurRange { min, max })
    }
}

/// A count range: `[3, 6]`, or one number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountRange {
    pub min: u32,
    pub max: u32,
}

impl<'de> Deserialize<'de> for CountRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        let count = |v: &toml::Value| match v {
            toml::Value::Integer(n) if *n >= 1 && *n <= crate::units::MAX_ROUNDS as i64 => {
                Ok(*n as u32)
            }
            other => Err(D::Error::custom(format!(
                "{other} is not a count; counts are whole numbers from 1 to {}",
                crate::units::MAX_ROUNDS
            ))),
        };
        let (min, max) = match &v {
            toml::Value::Array(a) if a.len() == 2 => (count(&a[0])?, count(&a[1])?),
            toml::Value::Array(_) => {
                return Err(D::Error::custom(
                    "a range is two counts [min, max], e.g. [3, 6]",
                ))
            }
            one => {
                let x = count(one)?;
                (x, x)
            }
        };
        if min > max {
            return Err(D::Error::custom(format!(
                "the range starts above its end ({min} > {max}); write it as [min, max]"
            )));
        }
        Ok(CountRange { min, max })
    }
}

/// A size: bytes, or "512MiB", "2GiB", "300MB".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        match &v {
            toml::Value::Integer(n) if *n > 0 => Ok(Size(*n as u64)),
            toml::Value::String(s) => crate::units::parse_size(s)
                .map(Size)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "{other} is not a size; write it like \"512MiB\" or \"2GiB\""
            ))),
        }
    }
}
