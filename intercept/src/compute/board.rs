//! The node's priority board, as the launch gate uses it: an online container's library
//! sets its bit while it has work on a device, and an offline container's library refuses
//! launches while any bit of the device's word is set.

use crate::container;
use std::sync::atomic::Ordering;
use tessera_region::layout::{ComputeAccount, PRIORITY_OFFLINE};
use tessera_region::{monotonic_ns, Board, Region};

/// The board and this container's bit on it, if it has both.
fn own_board_bit(acct: &ComputeAccount) -> Option<(&'static Board, u32)> {
    Some((container::board()?, acct.board_bit()?))
}

/// Sets this online container's bit for `device` on the board (if it has a board and a
/// bit), and notes when.
pub(crate) fn raise(acct: &ComputeAccount, device: usize) {
    if let Some((board, bit)) = own_board_bit(acct) {
        if board.set(device, bit) {
            // Relaxed: a timestamp for the scenario runner, after the store that matters.
            acct.board_set_ns.store(monotonic_ns(), Ordering::Relaxed);
        }
    }
}

/// Clears this online container's bit for `device` on the board.
pub(crate) fn clear(acct: &ComputeAccount, device: usize) {
    if let Some((board, bit)) = own_board_bit(acct) {
        board.clear(device, bit);
    }
}

/// Whether the board says online work runs on `device` at `now_ns`, for an offline
/// container (never for others): a bit the daemon says to ignore (one of no live online
/// container, of one that claims work it does not do, or of an idle one a neighbour keeps
/// setting) does not count.
pub(crate) fn online_elsewhere(
    region: &Region,
    acct: &ComputeAccount,
    device: usize,
    now_ns: u64,
) -> bool {
    // Relaxed: a setting of the daemon's, read afresh each time.
    acct.priority.load(Ordering::Relaxed) == PRIORITY_OFFLINE
        && container::board().is_some_and(|b| {
            let online = b.online(device);
            online != 0 && online & !region.board_ignore(device, now_ns) != 0
        })
}
