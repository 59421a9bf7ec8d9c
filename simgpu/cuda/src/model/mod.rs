//! The model: the state of the simulated driver (the process's attachment to the node, its
//! devices, contexts, streams, events, the executors and their time slicing, memory,
//! modules, graphs) and what can be done with it. Nothing here is an entry point: the files
//! above translate the C arguments of the driver API into calls here, and the results into
//! the driver's result codes.

pub(crate) mod capture;
pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod event;
pub(crate) mod exec;
pub(crate) mod graph;
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod records;
pub(crate) mod rm;
pub(crate) mod stream;
