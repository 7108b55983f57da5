// kubefan's SharedWorker: one multiplexed /ws socket for every tab of a
// browser that uses `connect()` (transport 'shared'), however many tabs are
// open. Started by SharedClient in kubefan.js as a module worker named after
// the gateway's URL; relays each tab's subscriptions and closes them when
// the tab goes away. See SharedHub in kubefan.js.
import {SharedHub} from './kubefan.js';

const hub = new SharedHub();
globalThis.addEventListener('connect', (event) => {
  for (const port of event.ports) hub.attach(port);
});
