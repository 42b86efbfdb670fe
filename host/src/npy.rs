//! NumPy `.npy` files (format version 1.0) of f32 and f64 arrays: little-endian, C order, any
//! number of dimensions (the `svd` command writes 2-D reconstructions and 1-D singular values).
//! `numpy.load` reads what [`write()`] writes; [`read()`] reads it back (version 1.0 and 2.0 headers,
//! little-endian C-order `<f4`/`<f8` data).
//!
//! Layout: the magic `\x93NUMPY`, the version bytes `1, 0`, the header length (`u16`, little-endian),
//! the header — a Python dict literal such as `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`
//! padded with spaces and ended by `\n` so that the data starts at a multiple of 64 bytes — then the
//! elements.

use crate::error::{Error, Result, ensure};
use ndarray::{Array2, ArrayView2};
use std::path::Path;

/// An element type `.npy` files hold here.
pub trait NpyElement: Copy {
    /// NumPy's type string (`<f4`, `<f8`).
    const DESCR: &'static str;
    /// Bytes per element.
    const SIZE: usize;
    /// Appends the little-endian bytes of `self`.
    fn put(self, out: &mut Vec<u8>);
    /// The element from its `SIZE` little-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

impl NpyElement for f32 {
    const DESCR: &'static str = "<f4";
    const SIZE: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

impl NpyElement for f64 {
    const DESCR: &'static str = "<f8";
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        f64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// The data of a `.npy` file starts at a multiple of this many bytes.
pub const ALIGNMENT: usize = 64;

/// The shape as a Python tuple: `()`, `(5,)`, `(3, 4)`.
pub fn shape_tuple(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The complete `.npy` v1.0 file of `data` (C order) with `shape`.
pub fn encode<T: NpyElement>(shape: &[usize], data: &[T]) -> Result<Vec<u8>> {
    let count: usize = shape.iter().product();
    ensure(count == data.len(), || {
        format!("{} values do not fill an array of shape {}", data.len(), shape_tuple(shape))
    })?;
    let mut header =
        format!("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", T::DESCR, shape_tuple(shape));
    // Magic (6) + version (2) + length (2) + header + '\n', padded to the alignment.
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(ALIGNMENT) - unpadded));
    header.push('\n');
    let header_len = u16::try_from(header.len()).map_err(|_| {
        Error::InvalidInput(format!("shape {} is too long for a .npy header", shape_tuple(shape)))
    })?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + data.len() * T::SIZE);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for &v in data {
        v.put(&mut out);
    }
    Ok(out)
}

/// Writes `data` (C order) with `shape` as a `.npy` file.
pub fn write<T: NpyElement>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    let bytes = encode(shape, data)?;
    std::fs::write(path, bytes).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("cannot write .npy file: {e}"),
    })
}

/// Writes a 2-D array (any memory layout; stored in C order) as a `.npy` file.
pub fn write_array2<T: NpyElement>(path: &Path, array: ArrayView2<T>) -> Result<()> {
    let (rows, cols) = array.dim();
    let data: Vec<T> = array.iter().copied().collect();
    write(path, &[rows, cols], &data)
}

/// The shape and C-order data of a `.npy` file's bytes holding `T`.
pub fn decode<T: NpyElement>(bytes: &[u8]) -> Result<(Vec<usize>, Vec<T>)> {
    let bad = |message: String| Error::InvalidInput(format!("not a .npy file of {}: {message}", T::DESCR));
    if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("no NumPy magic string".into()));
    }
    let (header_len, start) = match bytes[MAGIC.len()] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => {
            (u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize, 12)
        }
        major => return Err(bad(format!("format version {major} is not supported"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated or non-text header".into()))?;
    let descr = header_value(header, "descr").ok_or_else(|| bad(format!("no 'descr' in {header:?}")))?;
    if descr.trim_matches(|c| c == '\'' || c == '"') != T::DESCR {
        return Err(bad(format!("element type {descr}")));
    }
    let fortran = header_value(header, "fortran_order").ok_or_else(|| bad("no 'fortran_order'".into()))?;
    if fortran != "False" {
        return Err(bad("Fortran-order arrays are not supported".into()));
    }
    let shape_text = header_value(header, "shape").ok_or_else(|| bad("no 'shape'".into()))?;
    let shape = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad(format!("shape {shape_text}"))))
        .collect::<Result<Vec<_>>>()?;
    let data = &bytes[start + header_len..];
    let count: usize = shape.iter().product();
    if data.len() != count * T::SIZE {
        return Err(bad(format!("{} data bytes for shape {shape_text}", data.len())));
    }
    Ok((shape, data.chunks_exact(T::SIZE).map(T::get).collect()))
}

/// The text of `key`'s value in a `.npy` header dict: up to the next `,` outside parentheses
/// (or the closing `}`).
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let after = &header[header.find(&format!("'{key}'"))? + key.len() + 2..];
    let value = after.trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0;
    let end = value.char_indices().find_map(|(i, c)| match c {
        '(' => {
            depth += 1;
            None
        }
        ')' => {
            depth -= 1;
            (depth == 0).then_some(i + 1)
        }
        ',' | '}' if depth == 0 => Some(i),
        _ => None,
    })?;
    Some(value[..end].trim())
}

/// Reads a `.npy` file holding `T`: its shape and C-order data.
pub fn read<T: NpyElement>(path: &Path) -> Result<(Vec<usize>, Vec<T>)> {
    let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
    let bytes = std::fs::read(path).map_err(|e| file_error(e.to_string()))?;
    decode(&bytes).map_err(|e| file_error(e.to_string()))
}

/// Reads a 2-D `.npy` file holding `T`.
pub fn read_array2<T: NpyElement>(path: &Path) -> Result<Array2<T>> {
    let (shape, data) = read::<T>(path)?;
    match shape[..] {
        [rows, cols] => Ok(Array2::from_shape_vec((rows, cols), data).expect("rows·cols values")),
        _ => Err(Error::File {
            path: path.to_path_buf(),
            message: format!("shape {} is not 2-D", shape_tuple(&shape)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_padded_to_64_bytes_and_shapes_are_python_tuples() {
        for shape in [vec![], vec![5], vec![3, 4], vec![1000, 2000, 3]] {
            let count: usize = shape.iter().product();
            let bytes = encode(&shape, &vec![1.5f32; count]).unwrap();
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + header_len) % ALIGNMENT, 0, "{shape:?}");
            assert_eq!(bytes[10 + header_len - 1], b'\n');
            assert_eq!(bytes.len(), 10 + header_len + 4 * count);
            let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
            assert!(header.starts_with(&format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}",
                shape_tuple(&shape)
            )));
        }
        assert_eq!(shape_tuple(&[]), "()");
        assert_eq!(shape_tuple(&[7]), "(7,)");
        assert_eq!(shape_tuple(&[3, 4]), "(3, 4)");
    }

    #[test]
    fn round_trip_and_rejections() {
        let data: Vec<f64> = (0..12).map(|i| i as f64 * 0.25 - 1.0).collect();
        let bytes = encode(&[3, 4], &data).unwrap();
        assert_eq!(decode::<f64>(&bytes).unwrap(), (vec![3, 4], data.clone()));
        let one_d = encode(&[12], &data).unwrap();
        assert_eq!(decode::<f64>(&one_d).unwrap(), (vec![12], data.clone()));
        assert!(decode::<f32>(&bytes).unwrap_err().to_string().contains("element type '<f8'"));
        assert!(decode::<f64>(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode::<f64>(b"not numpy").is_err());
        assert!(encode(&[5], &data).is_err());
    }
}
