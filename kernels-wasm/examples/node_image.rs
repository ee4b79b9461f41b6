//! The ESP32 node program linked into a bare-metal image for `riscv32imc-unknown-none-elf` (the
//! ESP32-C3's ISA): the heap in a fixed SRAM array, frames in and out over UART0's FIFO.
//!
//! ```text
//! cargo build --release -p kernels-wasm --no-default-features --features node-image \
//!     --example node_image --target riscv32imc-unknown-none-elf
//! ```
//!
//! This proves that the node program (kernels, framing, budget, the BitNet blocks) builds and links
//! for a microcontroller without `std`, atomics or an OS, and gives its code size. It is not a
//! bootable firmware: there is no startup code (stack pointer, clocks, watchdogs) and the PSRAM is
//! not mapped; a board build adds those through Espressif's `esp-hal` (see docs/esp32.md). The UART
//! registers are the ESP32-C3's UART0 (FIFO at 0x6000_0000, status at +0x1C); the image has not
//! run on a board.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod image {
    extern crate alloc;

    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::mem::MaybeUninit;
    use core::ptr::NonNull;
    use kernels_wasm::bitnet::backend::Backend;
    use kernels_wasm::esp32::msg::Caps;
    use kernels_wasm::esp32::wire::Decoder;
    use kernels_wasm::esp32::Node;
    use linked_list_allocator::Heap;

    /// The heap: what a board gives the node program (the budget it announces must not exceed it).
    const HEAP: usize = 320 * 1024;
    static mut ARENA: [MaybeUninit<u8>; HEAP] = [MaybeUninit::uninit(); HEAP];

    /// The heap of a single core without interrupt handlers that allocate: no lock (the ISA has
    /// no compare-and-swap to build one from).
    struct OneCore(UnsafeCell<Heap>);

    // SAFETY: one core, and nothing allocates from an interrupt.
    unsafe impl Sync for OneCore {}

    unsafe impl GlobalAlloc for OneCore {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: see `Sync` above.
            let heap = unsafe { &mut *self.0.get() };
            heap.allocate_first_fit(layout).map_or(core::ptr::null_mut(), |p| p.as_ptr())
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { (*self.0.get()).deallocate(NonNull::new_unchecked(ptr), layout) }
        }
    }

    #[global_allocator]
    static ALLOC: OneCore = OneCore(UnsafeCell::new(Heap::empty()));

    const UART0_FIFO: *mut u32 = 0x6000_0000 as *mut u32;
    const UART0_STATUS: *const u32 = 0x6000_001C as *const u32;

    fn rx_count() -> u32 {
        // SAFETY: a memory-mapped register of the ESP32-C3.
        unsafe { core::ptr::read_volatile(UART0_STATUS) & 0x3FF }
    }

    fn tx_full() -> bool {
        // SAFETY: as above; TXFIFO_CNT is bits 16..26, the FIFO holds 128 bytes.
        unsafe { (core::ptr::read_volatile(UART0_STATUS) >> 16) & 0x3FF >= 127 }
    }

    fn write(bytes: &[u8]) {
        for &b in bytes {
            while tx_full() {}
            // SAFETY: as above.
            unsafe { core::ptr::write_volatile(UART0_FIFO, b as u32) };
        }
    }

    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        // SAFETY: the arena is handed to the allocator once, before any allocation.
        unsafe { (*ALLOC.0.get()).init(core::ptr::addr_of_mut!(ARENA) as *mut u8, HEAP) };
        let caps = Caps {
            name: alloc::string::String::from("esp32-c3 (bare metal)"),
            sram: HEAP as u64,
            psram: 4 * 1024 * 1024,
            clock_hz: 160_000_000,
            link_bps: 921_600,
            emulated: false,
        };
        let mut node = Node::new(caps, Backend::Scalar, None);
        let mut dec = Decoder::default();
        loop {
            let mut got = [0u8; 64];
            let n = (rx_count() as usize).min(got.len());
            for b in got.iter_mut().take(n) {
                // SAFETY: as above.
                *b = unsafe { core::ptr::read_volatile(UART0_FIFO) } as u8;
            }
            dec.push(&got[..n]);
            while let Some(d) = dec.next_frame() {
                write(&node.on_decoded(d));
            }
        }
    }

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        loop {}
    }
}

/// On a host this example has nothing to do: it exists for the microcontroller target.
#[cfg(not(target_os = "none"))]
fn main() {
    println!("node_image is for riscv32imc-unknown-none-elf; see its doc comment");
}
