"""Live: a camera's frames through the chain as they come, with latency bounded instead of queued.

    camera ─► LatestFrame ─► LiveLoop (one thread) ─► sinks: the browser, a window, a virtual camera, a recorder
              newest wins     FrameRenderer.render(track=True), model lock per frame

- `loop`: the mailbox, the render loop, its figures, sinks on their own threads (the drop policy lives here).
- `faces`: the tracker re-made for the processed rate, detection sized for a camera and run off the render thread.
- `record`: recording the processed stream (and the microphone) to a video tagged synthetic, with its sidecar.
- `devices`: local cameras (a camera number or a video file played as one) and local sinks (a window, a virtual
  camera, a folder of frames for tests); `local.run_camera` streams one into the others (`launch.py live`).
- `testcard`: the demo clip with a frame counter drawn in, as a fake camera for the tests and the benchmark.

The web UI's Live tab feeds the same loop from WebRTC (webui/live.py, webui/live_rtc.py).

**Drop policy.** A camera delivers frames at its rate whatever the chain's speed. The input is a one-place
mailbox: a frame that arrives while another waits replaces it, so when the chain is slower than the camera the
frames in between are dropped and the one processed next is always the newest. What comes out is at most one
processing time behind the frame that went in (plus the transport), never a growing queue. A sink slower than
the loop gets the same treatment. Frames are never passed on unprocessed: while the loop cannot render (a job
holds the model), sinks keep the last processed frame.

**Model lock.** Each frame takes the engine service's `model_lock` for its render only, as a preview does. Brief
work waiting for it (a preview, a face search: `ModelLock.brief`) goes before the loop's next frame, by the lock's
own rule; after each frame the loop also leaves it free for `COURTESY_S`, so that another live stream waiting for
it gets it between two frames (Python's lock is not fair: without the gap the loop could take it straight back).
A job holds the lock for its whole run (it lets only `brief()` work in between its batches, and a stream's frames
are not): a live stream then waits, says so, and resumes with the newest frame.

**Tracking.** Faces are tracked from frame to frame (re-fits between detections, smoothing in seconds). The
tracker must know the rate it sees frames at — for a live stream the processed rate, not the camera's — so the
loop measures it and re-times the tracker when it is off by more than `RETIME_RATIO`. Detections run on a thread
of their own (`faces.BackgroundDetector`): no frame waits for one, their faces join on the frame after.

**Fresher frames.** A frame that waited in the mailbox more than half the camera's interval gives way to the next
one when that is due soon (`LiveLoop._fresher`): what is rendered is at most about half an interval old.
"""
