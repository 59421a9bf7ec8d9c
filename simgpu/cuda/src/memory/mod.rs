//! The entry points of memory: linear memory, pools, arrays, copies, pointers, stream
//! memory operations and virtual memory management.

mod array;
mod copy;
mod linear;
mod pointer;
mod pool;
mod stream_value;
mod vmm;
