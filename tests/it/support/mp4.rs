//! Just enough MP4 box parsing to check the layout of an encoded file.

/// Top-level box types in order.
pub fn top_level_boxes(bytes: &[u8]) -> Vec<String> {
    let mut boxes = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let size32 = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as u64;
        let kind = String::from_utf8_lossy(&bytes[at + 4..at + 8]).into_owned();
        let size = match size32 {
            0 => (bytes.len() - at) as u64,
            1 => u64::from_be_bytes(bytes[at + 8..at + 16].try_into().unwrap()),
            n => n,
        };
        boxes.push(kind);
        if size < 8 {
            break;
        }
        at += size as usize;
    }
    boxes
}

/// Whether `moov` comes before `mdat` (playback can start before the download ends).
pub fn moov_before_mdat(bytes: &[u8]) -> bool {
    let boxes = top_level_boxes(bytes);
    let moov = boxes.iter().position(|b| b == "moov");
    let mdat = boxes.iter().position(|b| b == "mdat");
    matches!((moov, mdat), (Some(m), Some(d)) if m < d)
}
