// MQTT.js against ternmq: for each protocol version, a subscriber and a publisher
// exchange QoS 0/1/2 messages and a retained one. Prints one JSON line with what arrived.
// The first argument is a port (mqtt://127.0.0.1:PORT) or a URL (ws://127.0.0.1:PORT/mqtt).
import mqtt from "mqtt";

const target = process.argv[2];
const url = /^\d+$/.test(target) ? `mqtt://127.0.0.1:${target}` : target;
const version = Number(process.argv[3]);
const topic = `js/${version}/${process.pid}`;
const deadline = setTimeout(() => { console.log(JSON.stringify({ error: "timeout" })); process.exit(2); }, 20000);

function connect(clientId) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { clientId, protocolVersion: version, reconnectPeriod: 0 });
    c.once("connect", () => resolve(c));
    c.once("error", reject);
  });
}

const sub = await connect(`js-sub-${version}`);
const got = [];
const done = new Promise((resolve) => {
  sub.on("message", (t, payload, packet) => {
    got.push({ topic: t, payload: payload.toString(), qos: packet.qos, retain: packet.retain });
    if (got.length === 4) resolve();
  });
});
const pub = await connect(`js-pub-${version}`);
await pub.publishAsync(`${topic}/kept`, "R", { qos: 1, retain: true });
await sub.subscribeAsync(`${topic}/#`, { qos: 2 });
for (const qos of [0, 1, 2]) {
  await pub.publishAsync(`${topic}/m`, `q${qos}`, { qos });
}
await done;
clearTimeout(deadline);
console.log(JSON.stringify({ got }));
await pub.endAsync();
await sub.endAsync();
