//! CUDA graphs: a sequence of launches recorded once ([`Device::capture`]) and replayed with one
//! call each time ([`Device::replay`]), which saves the host's per-launch cost (a few µs each) for
//! short kernels run many times. `cust` 0.3 has no graph API; this module calls the driver's stream
//! capture (`cuStreamBeginCapture`, `cuStreamEndCapture`, `cuGraphInstantiateWithFlags`,
//! `cuGraphLaunch`) through `cust::sys`.

use crate::Device;
use crate::error::{Error, Result, raw};
use cust::sys::{CUgraph, CUgraphExec, CUstreamCaptureMode};

/// Recorded device work, replayable. It keeps the recording closure — and so the borrows of the
/// buffers its launches use — for as long as it lives: a replay never sees a freed buffer.
pub struct Graph<'a> {
    record: Box<dyn FnMut() -> Result<()> + 'a>,
    /// The instantiated graph on a GPU; `None` in the simulator, which replays by running `record`.
    gpu: Option<(CUgraph, CUgraphExec)>,
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        if let Some((graph, exec)) = self.gpu {
            // SAFETY: handles made by `Device::capture`, destroyed once; errors are ignored, as a
            // drop cannot report them.
            unsafe {
                cust::sys::cuGraphExecDestroy(exec);
                cust::sys::cuGraphDestroy(graph);
            }
        }
    }
}

impl Device {
    /// Records the work `record` queues on the device's queue ([`Device::launch`] and the
    /// asynchronous copies) into a graph, without running it. `record` must not wait for the
    /// device (no downloads, no `synchronize`): the capture then fails with the driver's error.
    /// In the simulator, nothing runs until [`Device::replay`], which runs `record` again.
    pub fn capture<'a>(&self, mut record: impl FnMut() -> Result<()> + 'a) -> Result<Graph<'a>> {
        let Some(stream) = self.queue_stream() else {
            return Ok(Graph { record: Box::new(record), gpu: None });
        };
        let stream = stream.as_inner();
        // SAFETY: a live stream of this device's context.
        raw("cuStreamBeginCapture", unsafe {
            cust::sys::cuStreamBeginCapture_v2(
                stream,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })?;
        let recorded = record();
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above, whatever `record` did.
        let ended = raw("cuStreamEndCapture", unsafe { cust::sys::cuStreamEndCapture(stream, &mut graph) });
        let destroy = |graph: CUgraph| {
            if !graph.is_null() {
                // SAFETY: a graph the capture made and nothing else holds.
                unsafe { cust::sys::cuGraphDestroy(graph) };
            }
        };
        if let Err(e) = recorded.and(ended) {
            destroy(graph);
            return Err(Error::InvalidInput(format!(
                "capturing a graph: the recorded work may only queue device work (launches, asynchronous \
                 copies), not wait for it ({e})"
            )));
        }
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is the captured graph.
        if let Err(e) = raw("cuGraphInstantiateWithFlags", unsafe {
            cust::sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        }) {
            destroy(graph);
            return Err(e);
        }
        Ok(Graph { record: Box::new(record), gpu: Some((graph, exec)) })
    }

    /// Queues the work recorded in `graph` on the device's queue (in the simulator: runs it).
    pub fn replay(&self, graph: &mut Graph<'_>) -> Result<()> {
        match (graph.gpu, self.queue_stream()) {
            // SAFETY: an instantiated graph of this device and its queue's stream.
            (Some((_, exec)), Some(stream)) => {
                raw("cuGraphLaunch", unsafe { cust::sys::cuGraphLaunch(exec, stream.as_inner()) })
            }
            (None, None) => (graph.record)(),
            _ => Err(Error::InvalidInput("a graph captured on another device".into())),
        }
    }
}
