//! The image encodings of `SCREENSHOT_RESPONSE` (CAPABILITIES.md §4.5 step
//! 7): RGB JPEG at the requested quality (clamped to 1…100) or lossless
//! PNG.

use super::x11::capture::RgbImage;

/// JPEG at `quality`.
pub fn jpeg(image: &RgbImage, quality: i64) -> Result<Vec<u8>, String> {
    let quality = u8::try_from(quality.clamp(1, 100)).unwrap_or(75);
    let (Ok(width), Ok(height)) = (u16::try_from(image.width), u16::try_from(image.height)) else {
        return Err(format!(
            "{}x{} is too large for JPEG",
            image.width, image.height
        ));
    };
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, quality)
        .encode(&image.pixels, width, height, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Lossless PNG.
pub fn png(image: &RgbImage) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, image.width, image.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer
            .write_image_data(&image.pixels)
            .map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}
