//! Screen capture (CAPABILITIES.md §4.5): the root window's pixels of one
//! rectangle through `GetImage`, converted to RGB with the visual's colour
//! masks, and black filled over the masked areas before anything encodes
//! them.

use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder, VisualClass};

use super::{Display, text};
use crate::desktop::geometry::Rect;

/// An RGB image, 3 bytes per pixel, rows top to bottom.
#[derive(Debug, Clone)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// Fills the part of `area` (root coordinates) that lies inside the
    /// image, whose top-left corner is at `origin`, with black.
    pub fn black_out(&mut self, origin: [i64; 2], area: &Rect) {
        let image = Rect::new(
            origin[0],
            origin[1],
            i64::from(self.width),
            i64::from(self.height),
        );
        let Some(part) = image.intersect(area) else {
            return;
        };
        let width = self.width as usize;
        // Both differences are inside the image, so they fit.
        let x0 = usize::try_from(part.x - origin[0]).unwrap_or(0);
        let y0 = usize::try_from(part.y - origin[1]).unwrap_or(0);
        let w = usize::try_from(part.w).unwrap_or(0);
        let h = usize::try_from(part.h).unwrap_or(0);
        for row in y0..y0 + h {
            let start = (row * width + x0) * 3;
            if let Some(span) = self.pixels.get_mut(start..start + w * 3) {
                span.fill(0);
            }
        }
    }
}

/// How one pixel of a `ZPixmap` reply is laid out.
struct Layout {
    bytes_per_pixel: usize,
    stride: usize,
    msb_first: bool,
    masks: [u32; 3],
}

impl Display {
    /// Captures `rect` of the root window.
    pub fn capture(&self, rect: Rect) -> Result<RgbImage, String> {
        let (Ok(x), Ok(y), Ok(w), Ok(h)) = (
            i16::try_from(rect.x),
            i16::try_from(rect.y),
            u16::try_from(rect.w),
            u16::try_from(rect.h),
        ) else {
            return Err(format!(
                "the rectangle {rect:?} is outside the X coordinate range"
            ));
        };
        let reply = self
            .conn
            .get_image(ImageFormat::Z_PIXMAP, self.root, x, y, w, h, !0)
            .map_err(text)?
            .reply()
            .map_err(text)?;
        let layout = self.layout(reply.depth, reply.visual, usize::from(w))?;
        let width = usize::from(w);
        let height = usize::from(h);
        if reply.data.len() < layout.stride * height {
            return Err(format!(
                "the X server sent {} bytes for a {width}x{height} image",
                reply.data.len()
            ));
        }
        let shifts = layout.masks.map(|m| (m.trailing_zeros(), mask_max(m)));
        let mut pixels = Vec::with_capacity(width * height * 3);
        for row in reply.data.chunks_exact(layout.stride).take(height) {
            for raw in row.chunks_exact(layout.bytes_per_pixel).take(width) {
                let mut value: u32 = 0;
                if layout.msb_first {
                    for byte in raw {
                        value = (value << 8) | u32::from(*byte);
                    }
                } else {
                    for byte in raw.iter().rev() {
                        value = (value << 8) | u32::from(*byte);
                    }
                }
                for (mask, (shift, max)) in layout.masks.iter().zip(shifts) {
                    let channel = (value & mask) >> shift;
                    pixels.push(scale_to_byte(channel, max));
                }
            }
        }
        Ok(RgbImage {
            width: u32::from(w),
            height: u32::from(h),
            pixels,
        })
    }

    fn layout(&self, depth: u8, visual: u32, width: usize) -> Result<Layout, String> {
        let setup = self.conn.setup();
        let format = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == depth)
            .ok_or_else(|| format!("no pixmap format for depth {depth}"))?;
        let bits = usize::from(format.bits_per_pixel);
        if !matches!(bits, 16 | 24 | 32) {
            return Err(format!("{bits} bits per pixel are not supported"));
        }
        let pad = usize::from(format.scanline_pad).max(8);
        let stride = (width * bits).div_ceil(pad) * pad / 8;
        let visual = setup
            .roots
            .iter()
            .flat_map(|screen| &screen.allowed_depths)
            .flat_map(|d| &d.visuals)
            .find(|v| v.visual_id == visual)
            .ok_or_else(|| format!("unknown visual {visual}"))?;
        if !matches!(
            visual.class,
            VisualClass::TRUE_COLOR | VisualClass::DIRECT_COLOR
        ) {
            return Err("the root window's visual is not true colour".into());
        }
        let masks = [visual.red_mask, visual.green_mask, visual.blue_mask];
        if masks.contains(&0) {
            return Err("the root window's visual has an empty colour mask".into());
        }
        Ok(Layout {
            bytes_per_pixel: bits / 8,
            stride,
            msb_first: setup.image_byte_order == ImageOrder::MSB_FIRST,
            masks,
        })
    }
}

/// The largest value of a channel under `mask`.
fn mask_max(mask: u32) -> u32 {
    mask >> mask.trailing_zeros()
}

/// A channel value of `0..=max` as `0..=255`.
fn scale_to_byte(value: u32, max: u32) -> u8 {
    if max == 255 {
        return u8::try_from(value).unwrap_or(u8::MAX);
    }
    let scaled = (u64::from(value) * 255 + u64::from(max) / 2) / u64::from(max.max(1));
    u8::try_from(scaled).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn black_out_touches_only_the_overlap() {
        let mut image = RgbImage {
            width: 4,
            height: 2,
            pixels: vec![255; 4 * 2 * 3],
        };
        image.black_out([10, 10], &Rect::new(12, 0, 100, 11));
        let row0: Vec<u8> = image.pixels[..12].to_vec();
        assert_eq!(row0, [255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 0, 0]);
        assert!(image.pixels[12..].iter().all(|b| *b == 255));
    }

    #[test]
    fn channels_of_any_width_scale_to_full_bytes() {
        assert_eq!(scale_to_byte(31, 31), 255);
        assert_eq!(scale_to_byte(0, 63), 0);
        assert_eq!(scale_to_byte(200, 255), 200);
        assert_eq!(mask_max(0xf800), 31);
    }
}
