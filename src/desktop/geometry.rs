//! Rectangles in X root-window coordinates (CAPABILITIES.md §4.3): the
//! displays a point must fall inside, a screenshot region's intersection
//! with its monitor, and the visible parts of a window under the ones
//! stacked above it.
//!
//! Pure arithmetic: nothing here talks to a display server. Every rectangle
//! is half-open (`x ≤ px < x + w`), so the shared edge of two stitched
//! monitors belongs to one of them only.

/// A rectangle: top-left corner and size, in root-window pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rect {
    pub x: i64,
    pub y: i64,
    pub w: i64,
    pub h: i64,
}

impl Rect {
    pub fn new(x: i64, y: i64, w: i64, h: i64) -> Rect {
        Rect { x, y, w, h }
    }

    /// From the wire's `[x1, y1, x2, y2]`; `None` when `x2 ≤ x1` or `y2 ≤ y1`.
    pub fn from_corners([x1, y1, x2, y2]: [i64; 4]) -> Option<Rect> {
        let w = x2.checked_sub(x1)?;
        let h = y2.checked_sub(y1)?;
        (w > 0 && h > 0).then_some(Rect::new(x1, y1, w, h))
    }

    /// `[x1, y1, x2, y2]`.
    pub fn corners(&self) -> [i64; 4] {
        [
            self.x,
            self.y,
            self.x.saturating_add(self.w),
            self.y.saturating_add(self.h),
        ]
    }

    pub fn right(&self) -> i64 {
        self.x.saturating_add(self.w)
    }

    pub fn bottom(&self) -> i64 {
        self.y.saturating_add(self.h)
    }

    pub fn is_empty(&self) -> bool {
        self.w <= 0 || self.h <= 0
    }

    pub fn contains(&self, [px, py]: [i64; 2]) -> bool {
        self.x <= px && px < self.right() && self.y <= py && py < self.bottom()
    }

    /// The common part, or `None` when they do not overlap.
    pub fn intersect(&self, other: &Rect) -> Option<Rect> {
        let x = self.x.max(other.x);
        let y = self.y.max(other.y);
        let r = self.right().min(other.right());
        let b = self.bottom().min(other.bottom());
        (r > x && b > y).then_some(Rect::new(x, y, r - x, b - y))
    }

    /// The parts of `self` outside `cut`: at most four rectangles that do
    /// not overlap.
    pub fn subtract(&self, cut: &Rect) -> Vec<Rect> {
        let Some(common) = self.intersect(cut) else {
            return vec![*self];
        };
        let mut parts = Vec::with_capacity(4);
        // Full-width bands above and below, then the sides of the middle band.
        if common.y > self.y {
            parts.push(Rect::new(self.x, self.y, self.w, common.y - self.y));
        }
        if common.bottom() < self.bottom() {
            parts.push(Rect::new(
                self.x,
                common.bottom(),
                self.w,
                self.bottom() - common.bottom(),
            ));
        }
        if common.x > self.x {
            parts.push(Rect::new(self.x, common.y, common.x - self.x, common.h));
        }
        if common.right() < self.right() {
            parts.push(Rect::new(
                common.right(),
                common.y,
                self.right() - common.right(),
                common.h,
            ));
        }
        parts
    }
}

/// The parts of `area` that none of `above` covers.
pub fn visible_parts(area: Rect, above: &[Rect]) -> Vec<Rect> {
    let mut parts = vec![area];
    for cover in above {
        parts = parts.iter().flat_map(|part| part.subtract(cover)).collect();
        if parts.is_empty() {
            break;
        }
    }
    parts
}

/// Whether `point` is inside at least one of `rects`.
pub fn inside_any(rects: &[Rect], point: [i64; 2]) -> bool {
    rects.iter().any(|rect| rect.contains(point))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_edge_of_two_monitors_belongs_to_the_right_one() {
        let left = Rect::new(0, 0, 100, 50);
        let right = Rect::new(100, 0, 100, 50);
        assert!(!left.contains([100, 10]));
        assert!(right.contains([100, 10]));
        assert!(left.contains([99, 49]));
        assert!(!left.contains([99, 50]));
    }

    #[test]
    fn corners_with_no_area_are_no_rectangle() {
        assert_eq!(Rect::from_corners([5, 5, 5, 10]), None);
        assert_eq!(Rect::from_corners([5, 5, 4, 10]), None);
        assert_eq!(
            Rect::from_corners([1, 2, 4, 6]),
            Some(Rect::new(1, 2, 3, 4))
        );
        assert_eq!(Rect::from_corners([i64::MIN, 0, i64::MAX, 1]), None);
    }

    #[test]
    fn intersection_is_none_when_rectangles_only_touch() {
        let a = Rect::new(0, 0, 10, 10);
        assert_eq!(a.intersect(&Rect::new(10, 0, 5, 5)), None);
        assert_eq!(
            a.intersect(&Rect::new(5, 5, 10, 10)),
            Some(Rect::new(5, 5, 5, 5))
        );
    }

    #[test]
    fn subtracting_a_hole_leaves_four_parts_of_the_right_area() {
        let area = Rect::new(0, 0, 10, 10);
        let parts = area.subtract(&Rect::new(3, 3, 4, 4));
        assert_eq!(parts.len(), 4);
        let total: i64 = parts.iter().map(|r| r.w * r.h).sum();
        assert_eq!(total, 100 - 16);
        for (i, a) in parts.iter().enumerate() {
            for b in &parts[i + 1..] {
                assert_eq!(a.intersect(b), None);
            }
        }
    }

    #[test]
    fn a_window_covered_entirely_has_no_visible_part() {
        let area = Rect::new(10, 10, 20, 20);
        assert!(visible_parts(area, &[Rect::new(0, 0, 100, 100)]).is_empty());
        let parts = visible_parts(area, &[Rect::new(20, 0, 100, 100)]);
        assert_eq!(parts, vec![Rect::new(10, 10, 10, 20)]);
    }
}
