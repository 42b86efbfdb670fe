//! The operand layout every kernel of the family takes: row, column and batch strides, so that one
//! launch serves a strided batch and a transposed view costs nothing.

/// Where element `(i, j)` of image `z` of a strided batch of matrices lives:
/// `z·batch + i·row + j·col` elements from the base pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Step between rows, elements.
    pub row: u32,
    /// Step between columns, elements.
    pub col: u32,
    /// Step between images, elements.
    pub batch: u32,
}

impl Layout {
    /// Row-major `rows × ld` storage (column `j` of row `i` at `i·ld + j`), images `batch` apart.
    pub const fn row_major(ld: u32, batch: u32) -> Layout {
        Layout { row: ld, col: 1, batch }
    }

    /// The transposed view of the same storage: element `(i, j)` of the view is `(j, i)` here.
    pub const fn transposed(self) -> Layout {
        Layout { row: self.col, col: self.row, batch: self.batch }
    }

    /// The offset of element `(i, j)` within an image, elements.
    #[inline(always)]
    pub(super) fn at(self, i: u32, j: u32) -> usize {
        i as usize * self.row as usize + j as usize * self.col as usize
    }
}
