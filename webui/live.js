// The Live tab's browser side (run by Gradio as the js_on_load of the #live-view HTML component, with `element`
// its root). window.facestudioLive.start(config) opens the camera, sends it to the server over WebRTC (token,
// size, rate and ICE servers in `config`, as the Start handler gave them) and shows what comes back;
// .stop() ends it. The stats line: frames shown per second, the server's processing time, and the latency from
// the camera to the screen (see webui/live_rtc.py for how it is measured). The page's figures are in .figures.
const L = (window.facestudioLive = window.facestudioLive || {});
L.element = element;
const find = (selector) => L.element.querySelector(selector);

if (!L.ready) {
  L.ready = true;
  L.figures = { fps: 0, processing: null, latency: null, dropped: null, inputFps: null, state: "", shown: 0 };

  L.say = (text, warn = false) => {
    const line = find(".fs-live-stats");
    if (line) {
      line.textContent = text;
      line.classList.toggle("fs-warn", warn);
    }
  };

  const epoch = () => performance.timeOrigin + performance.now();
  const median = (values) => {
    if (!values.length) return null;
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)];
  };

  const reset = () => {
    L.stamps = new Map(); // output pts (90 kHz) → the server's stamp of that frame
    L.recent = []; // the last stamps, to find the RTP timestamp offset
    L.offsets = new Map(); // candidate RTP offset → times seen
    L.offset = null;
    L.clock = null; // { offset: server − browser (ms), rtt }
    L.upstream = 0; // camera → server estimate (ms): encode time per frame + half the round trip
    L.shownAt = []; // times frames were shown (ms), last 3 s
    L.latencies = []; // [time shown, latency ms], last 3 s
    L.server = null; // the server's figures message
    L.statsPrevious = null;
  };
  reset();

  L.listCameras = async () => {
    const select = find(".fs-live-camera");
    if (!select || !navigator.mediaDevices?.enumerateDevices) return;
    const devices = (await navigator.mediaDevices.enumerateDevices()).filter((d) => d.kind === "videoinput");
    const chosen = select.value;
    select.replaceChildren(new Option("default camera", ""));
    devices.forEach((d, i) => select.add(new Option(d.label || `camera ${i + 1}`, d.deviceId)));
    select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
  };

  const onStamp = (message) => {
    if (message.t === "f") {
      L.stamps.set(message.pts, message);
      L.recent.push(message);
      if (L.recent.length > 60) L.recent.shift();
      if (L.stamps.size > 600) L.stamps.delete(L.stamps.keys().next().value);
    } else if (message.t === "s") {
      L.server = message;
      capRate(message.cap);
    } else if (message.t === "end") {
      L.stop(false).then(() => L.say(`the stream ended: ${message.reason}`, message.reason !== "stopped"));
    } else if (message.t === "pong") {
      const now = epoch();
      const rtt = now - message.c;
      const offset = message.s - (message.c + rtt / 2);
      if (!L.clock || rtt <= L.clock.rtt * 1.5) L.clock = { offset, rtt: Math.min(rtt, L.clock?.rtt ?? rtt) };
    }
  };

  // The server asks for no more frames than it can use (a few per processed one): the camera's encoder sends fewer.
  const capRate = async (cap) => {
    const sender = L.sender;
    if (!sender || !cap) return;
    const wanted = Math.min(cap, L.cameraFps || cap);
    if (L.cap && Math.abs(wanted - L.cap) < 2) return;
    L.cap = wanted;
    try {
      const parameters = sender.getParameters();
      if (!parameters.encodings || !parameters.encodings.length) return;
      parameters.encodings[0].maxFramerate = wanted;
      await sender.setParameters(parameters);
    } catch (error) {
      console.debug("maxFramerate not applied", error);
    }
  };

  // The stamp of a shown frame from its RTP timestamp: the sender adds a random offset to our pts, found as the
  // difference that recurs between shown frames and recent stamps.
  const stampOf = (rtp) => {
    if (L.offset === null) {
      for (const stamp of L.recent) {
        const candidate = (rtp - stamp.pts) >>> 0;
        const seen = (L.offsets.get(candidate) || 0) + 1;
        L.offsets.set(candidate, seen);
        if (seen >= 3) L.offset = candidate;
      }
      if (L.offsets.size > 5000) L.offsets.clear();
      return null;
    }
    return L.stamps.get((rtp - L.offset) >>> 0) || null;
  };

  // Every frame `video` shows: its stamp, so its latency. Stops when the element is replaced or the stream ends.
  L.watch = (video) => {
    const tick = (now, meta) => {
      if (!L.pc || video !== find(".fs-live-out")) return;
      const shown = performance.timeOrigin + (meta.expectedDisplayTime || now);
      L.figures.shown += 1;
      L.shownAt.push(shown);
      const stamp = meta.rtpTimestamp !== undefined ? stampOf(meta.rtpTimestamp) : null;
      if (stamp && L.clock) L.latencies.push([shown, shown - (stamp.arrived - L.clock.offset) + L.upstream]);
      video.requestVideoFrameCallback(tick);
    };
    video.requestVideoFrameCallback(tick);
  };

  // Encoder time per frame and half the round trip, from WebRTC's statistics (deltas between two reads).
  const readStats = async () => {
    if (!L.pc) return;
    const report = await L.pc.getStats();
    let encode = null;
    let rtt = null;
    report.forEach((s) => {
      if (s.type === "outbound-rtp" && s.kind === "video") {
        const previous = L.statsPrevious;
        if (previous && s.framesEncoded > previous.framesEncoded) {
          encode = ((s.totalEncodeTime - previous.totalEncodeTime) / (s.framesEncoded - previous.framesEncoded)) * 1000;
        }
        L.statsPrevious = { framesEncoded: s.framesEncoded, totalEncodeTime: s.totalEncodeTime };
      }
      if (s.type === "candidate-pair" && s.nominated && s.currentRoundTripTime !== undefined) {
        rtt = s.currentRoundTripTime * 1000;
      }
    });
    if (encode !== null || rtt !== null) L.upstream = (encode ?? 0) + (rtt ?? L.clock?.rtt ?? 0) / 2;
  };

  const show = () => {
    const now = epoch();
    L.shownAt = L.shownAt.filter((t) => now - t < 3000);
    L.latencies = L.latencies.filter(([t]) => now - t < 3000);
    const span = L.shownAt.length > 1 ? L.shownAt[L.shownAt.length - 1] - L.shownAt[0] : 0;
    const f = L.figures;
    f.fps = span > 0 ? ((L.shownAt.length - 1) * 1000) / span : 0;
    f.latency = median(L.latencies.map(([, v]) => v));
    const server = L.server;
    if (server) {
      Object.assign(f, { processing: server.proc, dropped: server.dropped, inputFps: server.in, state: server.state });
    }
    if (!L.pc) return;
    const parts = [`${f.fps.toFixed(1)} fps`];
    if (f.processing !== null) parts.push(`processing ${Math.round(f.processing)} ms`);
    parts.push(f.latency === null ? "latency …" : `latency ${Math.round(f.latency)} ms`);
    if (f.inputFps !== null) parts.push(`camera ${f.inputFps.toFixed(0)} fps, ${Math.round(f.dropped * 100)}% dropped`);
    if (server && server.recording !== null) parts.push(`● recording ${Math.floor(server.recording)} s`);
    const waiting = server && server.state !== "running" && server.state !== "starting";
    L.say(waiting ? `${server.state} — ${parts.join(" · ")}` : parts.join(" · "), waiting);
  };

  const gathered = (pc, ms) =>
    new Promise((done) => {
      if (pc.iceGatheringState === "complete") return done();
      const timer = setTimeout(done, ms);
      pc.addEventListener("icegatheringstatechange", () => {
        if (pc.iceGatheringState === "complete") {
          clearTimeout(timer);
          done();
        }
      });
    });

  L.start = async (text) => {
    if (!text) return;
    const config = JSON.parse(text);
    await L.stop(false);
    reset();
    L.say("asking for the camera…");
    const video = { width: { ideal: config.width }, height: { ideal: config.height }, frameRate: { ideal: config.fps } };
    const pick = find(".fs-live-camera")?.value;
    if (pick) video.deviceId = { exact: pick };
    let media;
    try {
      media = await navigator.mediaDevices.getUserMedia({ video, audio: Boolean(config.audio) });
    } catch (error) {
      L.say(`the camera could not be opened: ${error.name}: ${error.message}`, true);
      return;
    }
    L.local = media;
    find(".fs-live-in").srcObject = media;
    find(".fs-live-stage").scrollIntoView({ block: "center", behavior: "smooth" });
    L.listCameras();
    const pc = (L.pc = new RTCPeerConnection({ iceServers: config.ice || [] }));
    const channel = (L.channel = pc.createDataChannel("facestudio", { ordered: false, maxRetransmits: 0 }));
    channel.onmessage = (event) => onStamp(JSON.parse(event.data));
    const ping = () => channel.readyState === "open" && channel.send(JSON.stringify({ t: "ping", c: epoch() }));
    channel.onopen = ping;
    const camera = media.getVideoTracks()[0];
    L.cameraFps = camera.getSettings().frameRate || config.fps;
    L.cap = null;
    const sending = pc.addTransceiver(camera, { direction: "sendrecv" });
    L.sender = sending.sender;
    // When the encoder is short of CPU, fewer frames rather than smaller ones: the chain wants the face's pixels.
    try {
      const parameters = sending.sender.getParameters();
      parameters.degradationPreference = "maintain-resolution";
      await sending.sender.setParameters(parameters);
    } catch (error) {
      console.debug("degradationPreference not supported", error);
    }
    for (const track of media.getAudioTracks()) pc.addTransceiver(track, { direction: "sendonly" });
    pc.ontrack = (event) => {
      if (event.track.kind !== "video") return;
      if ("jitterBufferTarget" in event.receiver) event.receiver.jitterBufferTarget = 0;
      L.remote = new MediaStream([event.track]);
      const out = find(".fs-live-out");
      out.srcObject = L.remote;
      L.watch(out);
    };
    pc.onconnectionstatechange = () => {
      if (pc !== L.pc) return;
      if (pc.connectionState === "failed") L.say("the connection to the server failed (is UDP to it blocked?)", true);
      if (pc.connectionState === "closed" || pc.connectionState === "failed") L.stop(false);
    };
    L.timers = [setInterval(ping, 2000), setInterval(readStats, 1000), setInterval(show, 500)];
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc, 3000);
    let answer;
    try {
      const response = await fetch("live/offer", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ token: config.token, sdp: pc.localDescription.sdp, type: pc.localDescription.type }),
      });
      answer = await response.json();
      if (!response.ok) throw new Error(answer.detail || response.statusText);
    } catch (error) {
      await L.stop(false);
      L.say(`the stream could not start: ${error.message}`, true);
      return;
    }
    await pc.setRemoteDescription(answer);
    L.say("connecting…");
  };

  L.stop = async (say = true) => {
    (L.timers || []).forEach(clearInterval);
    L.timers = [];
    const pc = L.pc;
    L.pc = L.sender = null;
    if (pc) pc.close();
    if (L.local) L.local.getTracks().forEach((t) => t.stop());
    L.local = L.remote = null;
    for (const selector of [".fs-live-in", ".fs-live-out"]) {
      const video = find(selector);
      if (video) video.srcObject = null;
    }
    if (say) L.say("not streaming");
  };
}

// This element may be a new one (the tab re-rendered): show the streams there.
if (L.local) find(".fs-live-in").srcObject = L.local;
if (L.remote) {
  const out = find(".fs-live-out");
  out.srcObject = L.remote;
  L.watch(out);
}
