// The Web API Keys page. It talks to the administration API through the
// gateway, at webapi/keys and webapi/templates relative to the page, with
// the Keygate-Admin header that the gateway requires of every call.
// It builds every element with createElement and textContent: the
// Content-Security-Policy forbids HTML built from strings.
"use strict";

(() => {
	const base = new URL(".", location.origin + location.pathname); // no credentials from the address bar
	const $ = (sel, root = document) => root.querySelector(sel);
	const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

	// The privileges of each service, with the seeds' names for them.
	const privileges = {
		contracts: [["get", "get"], ["search", "search"], ["create", "create"], ["archive", "archive"], ["delete", "delete"]],
		share: [["get", "Get Shares"], ["list", "List Shares"], ["create", "Create Shares"], ["delete", "Delete Shares"]],
	};
	const serviceNames = { contracts: "contract", share: "share" };

	// api calls the administration API and returns the parsed reply; a
	// problem reply is thrown as an Error carrying the problem.
	async function api(method, path, body) {
		const init = { method, headers: { "Keygate-Admin": "1", Accept: "application/json" }, credentials: "same-origin", cache: "no-store" };
		if (body !== undefined) {
			init.headers["Content-Type"] = "application/json";
			init.body = JSON.stringify(body);
		}
		let res;
		try {
			res = await fetch(new URL(path, base), init);
		} catch (e) {
			throw Object.assign(new Error("The gateway could not be reached."), { problem: null });
		}
		if (res.status === 204) return null;
		let data = null;
		try {
			data = await res.json();
		} catch (e) {
			data = null;
		}
		if (!res.ok) {
			const p = data && typeof data === "object" ? data : { status: res.status, detail: res.statusText };
			const err = new Error(p.detail || p.title || ("HTTP " + res.status));
			err.problem = p;
			throw err;
		}
		return data;
	}

	// --- status line -------------------------------------------------

	const status = $("#status");
	function say(text, isError) {
		status.textContent = text;
		status.classList.toggle("bad", Boolean(isError));
	}

	// --- formatting ----------------------------------------------------

	// Short dates keep the table narrow; the full time is the title.
	const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "short" });
	const timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "your time zone";
	function timeCell(iso, empty) {
		if (!iso) return document.createTextNode(empty);
		const t = document.createElement("time");
		t.dateTime = iso;
		t.title = iso;
		t.textContent = dateFormat.format(new Date(iso));
		return t;
	}
	function el(tag, props, ...children) {
		const e = document.createElement(tag);
		Object.assign(e, props || {});
		for (const c of children) e.append(c);
		return e;
	}
	// cell is a table cell whose content is one element, so that the
	// phone layout (a label beside the content) holds.
	const cell = (tag, props, ...children) => el(tag, props, children.length === 1 ? children[0] : el("div", null, ...children));
	function list(values, empty) {
		if (!values || values.length === 0) return document.createTextNode(empty);
		const ul = el("ul", { className: "plain" });
		for (const v of values) ul.append(el("li", { textContent: v }));
		return ul;
	}
	// toLocalInput turns an RFC 3339 time into a datetime-local value in
	// the browser's time zone; fromLocalInput does the reverse.
	function toLocalInput(iso) {
		if (!iso) return "";
		const d = new Date(iso);
		const p = (n) => String(n).padStart(2, "0");
		return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
	}
	function fromLocalInput(v) {
		if (!v) return null;
		const d = new Date(v);
		if (isNaN(d)) return v; // the gateway names the field
		return d.toISOString().replace(/\.\d{3}Z$/, "Z");
	}
	const lines = (v) => v.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
	const fileName = (name) => (name.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[-.]+|-+$/g, "") || "key") + ".txt";

	// --- tabs ----------------------------------------------------------

	const tabs = $$('[role="tab"]');
	function select(tab, focus) {
		for (const t of tabs) {
			const on = t === tab;
			t.setAttribute("aria-selected", String(on));
			t.tabIndex = on ? 0 : -1;
			document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
		}
		if (focus) tab.focus();
		say("");
		load(tab.id.slice(4));
		history.replaceState(null, "", "#" + tab.id.slice(4));
	}
	for (const t of tabs) {
		t.addEventListener("click", () => select(t, false));
		t.addEventListener("keydown", (e) => {
			const i = tabs.indexOf(t);
			const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
			if (next === undefined) return;
			e.preventDefault();
			select(tabs[(next + tabs.length) % tabs.length], true);
		});
	}

	function load(section) {
		if (section === "templates") return loadTemplates();
		return loadKeys(section);
	}

	// --- keys ----------------------------------------------------------

	const keyColumns = (service) => [
		"Key Name", "Key Value", "Privileges", "Validity", "Allowed IPs", "Owner",
		...(service === "share" ? ["Admin projects"] : []),
		"Activity", "Actions",
	];

	async function loadKeys(service) {
		const panel = document.getElementById("panel-" + service);
		let keys;
		try {
			keys = await api("GET", "webapi/keys?service=" + service);
		} catch (e) {
			say("Could not load the keys: " + e.message, true);
			return;
		}
		const head = $("thead", panel);
		const body = $("tbody", panel);
		head.replaceChildren(el("tr", null, ...keyColumns(service).map((c) =>
			c === "Actions" ? el("th", { scope: "col" }, el("span", { className: "sr-only", textContent: c })) : el("th", { scope: "col", textContent: c }))));
		body.replaceChildren(...keys.map((k) => keyRow(service, k)));
		$(".empty", panel).hidden = keys.length > 0;
		$(".table-wrap", panel).hidden = keys.length === 0;
	}

	function keyRow(service, k) {
		const names = Object.fromEntries(privileges[service]);
		const labels = keyColumns(service);
		const labelled = (label, node) => el("div", null, el("span", { className: "muted", textContent: label + " " }), node);
		const limits = [];
		if (k.notValidBefore) limits.push(labelled("from", timeCell(k.notValidBefore)));
		if (k.notValidAfter) limits.push(labelled("until", timeCell(k.notValidAfter)));
		const validity = limits.length > 0 ? cell("td", { className: "validity" }, ...limits) : el("td", { textContent: "no limit" });
		const cells = [
			cell("th", { scope: "row", className: "name" }, el("span", { className: "key-name", textContent: k.name }),
				...(k.enabled === false ? [el("span", { className: "disabled-badge", textContent: "Disabled" })] : []),
				...(k.description ? [el("span", { className: "description", textContent: k.description })] : [])),
			cell("td", null, el("code", { className: "prefix", textContent: k.tokenPrefix + "…" })),
			cell("td", null, list(k.privileges.map((p) => names[p] || p), "none")),
			validity,
			cell("td", null, list(k.allowedIps, "any")),
			el("td", { textContent: k.owner }),
			...(service === "share" ? [cell("td", null, list(k.adminProjects, "none"))] : []),
			// Creation Time, Last Modification Time, Usage Count, Last Usage Time.
			cell("td", { className: "activity" },
				labelled("created", timeCell(k.creationTime, "")),
				labelled("modified", timeCell(k.lastModificationTime, "")),
				k.usageCount > 0
					? labelled("used " + (k.usageCount === 1 ? "once" : k.usageCount + " times") + ", last", timeCell(k.lastUsageTime, "never"))
					: el("div", { className: "muted", textContent: "never used" }),
				...(k.previousTokenExpiry ? [labelled("previous token until", timeCell(k.previousTokenExpiry, ""))] : [])),
		];
		const button = (label, cls, action) => {
			const b = el("button", { type: "button", className: cls, textContent: label });
			b.setAttribute("aria-label", label + " " + k.name);
			b.addEventListener("click", action);
			return b;
		};
		cells.push(cell("td", { className: "row-actions" },
			button("Edit", "edit", () => openKeyForm(service, k)),
			button("Reveal", "reveal", () => reveal(k, false)),
			button("Download", "download", () => reveal(k, true)),
			button("Roll", "roll", () => openRoll(k)),
			k.enabled === false
				? button("Enable", "enable", () => setEnabled(k, true))
				: button("Disable", "disable", () => confirm("Disable", "Disable key " + k.name + " (" + k.tokenPrefix + "…)?",
					"Clients that use this key are refused (401 key_disabled) from the moment it is disabled, until it is enabled again. Nothing else changes.",
					() => setEnabled(k, false))),
			button("Delete", "delete danger", () => confirmDelete(k))));
		cells.forEach((c, i) => c.setAttribute("data-label", labels[i]));
		const row = el("tr", null, ...cells);
		row.dataset.id = k.id;
		return row;
	}

	// --- the key form --------------------------------------------------

	const keyDialog = $("#key-dialog");
	const keyForm = $("#key-form");
	let editing = null; // { service, key, before } of the dialog

	function openKeyForm(service, key) {
		editing = { service, key };
		clearErrors(keyForm);
		keyForm.reset();
		$("#key-dialog-title").textContent = key ? "Edit key " + key.name : "Create " + serviceNames[service] + " key";
		const checks = $(".checks", keyForm);
		checks.replaceChildren(...privileges[service].map(([p, label]) => {
			const box = el("input", { type: "checkbox", id: "p-" + p, name: "privileges", value: p });
			box.checked = key ? key.privileges.includes(p) : false;
			return el("div", { className: "check" }, box, el("label", { htmlFor: box.id, textContent: label }));
		}));
		for (const e of $$(".share-only", keyForm)) e.hidden = service !== "share";
		const owner = $("#f-owner");
		owner.readOnly = Boolean(key);
		if (key) {
			$("#f-name").value = key.name;
			$("#f-description").value = key.description || "";
			owner.value = key.owner;
			$("#f-notValidBefore").value = toLocalInput(key.notValidBefore);
			$("#f-notValidAfter").value = toLocalInput(key.notValidAfter);
			$("#f-allowedIps").value = (key.allowedIps || []).join("\n");
			$("#f-adminProjects").value = (key.adminProjects || []).join("\n");
		}
		$("#key-save").textContent = key ? "Save" : "Create key";
		// What the form shows before any change, read back as a submit
		// would read it: the edit sends only what differs from this.
		editing.before = formValues(service);
		keyDialog.showModal();
		$("#f-name").focus();
	}

	// formValues reads the form as the API's key fields.
	function formValues(service) {
		const v = {
			name: $("#f-name").value.trim(),
			description: $("#f-description").value,
			privileges: $$('input[name="privileges"]:checked', keyForm).map((b) => b.value),
			notValidBefore: fromLocalInput($("#f-notValidBefore").value),
			notValidAfter: fromLocalInput($("#f-notValidAfter").value),
			allowedIps: lines($("#f-allowedIps").value),
		};
		if (service === "share") v.adminProjects = lines($("#f-adminProjects").value);
		return v;
	}

	// busy runs a form's request with its submit button disabled, so a
	// second click cannot send it twice.
	async function busy(form, request) {
		const submit = $('[type="submit"]', form);
		if (submit.disabled) return;
		submit.disabled = true;
		form.setAttribute("aria-busy", "true");
		try {
			await request();
		} finally {
			submit.disabled = false;
			form.removeAttribute("aria-busy");
		}
	}

	keyForm.addEventListener("submit", (e) => {
		e.preventDefault();
		busy(keyForm, async () => {
			const { service, key, before } = editing;
			const values = formValues(service);
			clearErrors(keyForm);
			let saved;
			try {
				if (key) {
					// Only what changed: a time shown to the second must not
					// overwrite a fraction set through the API, nor the form's
					// line endings a description's.
					const patch = {};
					for (const [f, v] of Object.entries(values)) {
						if (JSON.stringify(v) !== JSON.stringify(before[f])) patch[f] = v;
					}
					saved = await api("PATCH", "webapi/keys/" + encodeURIComponent(key.id), patch);
				} else {
					saved = await api("POST", "webapi/keys", { service, owner: $("#f-owner").value.trim(), ...values });
				}
			} catch (err) {
				showErrors(keyForm, err, "f-", "e-", "key-form-error");
				return;
			}
			keyDialog.close();
			await loadKeys(service);
			if (key) {
				say("Saved key " + saved.name + ".");
			} else {
				say("Created key " + saved.name + ".");
				showToken(saved, saved.token);
			}
		});
	});

	// showErrors puts each of the problem's field errors beside its field
	// (the field named before any [index]); the rest go above the form.
	function showErrors(form, err, inputPrefix, errorPrefix, generalId) {
		const general = document.getElementById(generalId);
		const p = err.problem;
		const rest = [];
		for (const fe of (p && p.errors) || []) {
			const field = fe.field.split(/[[.]/)[0];
			const box = document.getElementById(errorPrefix + field);
			if (!box) {
				rest.push(fe.message);
				continue;
			}
			box.append(el("span", { className: "msg", textContent: fe.message })); // one line each
			box.hidden = false;
			const input = document.getElementById(inputPrefix + field) || box.closest("fieldset");
			if (input) input.setAttribute("aria-invalid", "true");
		}
		if (rest.length > 0 || !p || !p.errors || p.errors.length === 0) {
			general.textContent = rest.length > 0 ? rest.join(" ") : err.message;
			general.hidden = false;
		}
		const first = $('[aria-invalid="true"]', form);
		if (first) first.focus();
	}

	function clearErrors(form) {
		for (const e of $$(".error, .form-error", form)) {
			e.textContent = "";
			e.hidden = true;
		}
		for (const e of $$('[aria-invalid="true"]', form)) e.removeAttribute("aria-invalid");
	}

	for (const b of $$(".create-key")) {
		b.addEventListener("click", () => openKeyForm(b.closest("[data-service]").dataset.service, null));
	}
	for (const d of $$("dialog")) {
		for (const c of $$(".cancel", d)) c.addEventListener("click", () => d.close());
	}

	// --- tokens --------------------------------------------------------

	const tokenDialog = $("#token-dialog");
	const tokenValue = $("#token-value");
	let shown = null; // the key whose token the dialog shows

	async function reveal(k, download) {
		let reply;
		try {
			reply = await api("POST", "webapi/keys/" + encodeURIComponent(k.id) + "/reveal");
		} catch (e) {
			say("Could not reveal the token of " + k.name + ": " + e.message, true);
			return;
		}
		if (download) {
			downloadToken(k, reply.token);
			return;
		}
		showToken(k, reply.token);
	}

	function showToken(k, token) {
		shown = k;
		$("#token-dialog-title").textContent = "Token of " + k.name;
		tokenValue.value = token;
		tokenDialog.showModal();
		tokenValue.select();
	}

	// The token leaves the page when the dialog closes, however it closes
	// (Done, or Escape, whose close event comes a moment later).
	function forgetToken() {
		tokenValue.value = "";
		shown = null;
	}
	tokenDialog.addEventListener("close", forgetToken);
	$("#token-done").addEventListener("click", () => {
		forgetToken();
		tokenDialog.close();
	});
	$("#token-copy").addEventListener("click", async () => {
		try {
			await navigator.clipboard.writeText(tokenValue.value);
		} catch (e) {
			tokenValue.select();
			document.execCommand("copy");
		}
		say("Copied the token of " + shown.name + ".");
	});
	$("#token-download").addEventListener("click", () => downloadToken(shown, tokenValue.value));

	// downloadToken saves the token as a text file named after the key,
	// from memory: the token is never in a URL the server sees.
	function downloadToken(k, token) {
		const url = URL.createObjectURL(new Blob([token + "\n"], { type: "text/plain" }));
		const a = el("a", { href: url, download: fileName(k.name) });
		document.body.append(a);
		a.click();
		a.remove();
		setTimeout(() => URL.revokeObjectURL(url), 1000);
		say("Downloaded the token of " + k.name + " as " + fileName(k.name) + ".");
	}

	// --- delete --------------------------------------------------------

	const confirmDialog = $("#confirm-dialog");
	let confirmAction = null;

	function confirm(verb, title, text, action) {
		$("#confirm-title").textContent = title;
		$("#confirm-text").textContent = text;
		$("#confirm-yes").textContent = verb;
		confirmAction = action;
		confirmDialog.showModal();
		$(".cancel", confirmDialog).focus();
	}
	// The action is taken, and forgotten, before the dialog closes: a close
	// event arrives a moment later, perhaps after the next confirm began.
	$("#confirm-yes").addEventListener("click", async () => {
		const action = confirmAction;
		confirmAction = null;
		confirmDialog.close();
		if (action) await action();
	});

	// confirmRemoval asks, then deletes path, reloads the table and says
	// so: verb and what name it ("Delete", "key ci").
	function confirmRemoval(verb, what, consequence, path, reload) {
		confirm(verb, verb + " " + what + "?", consequence, async () => {
			try {
				await api("DELETE", path);
			} catch (e) {
				say("Could not " + verb.toLowerCase() + " " + what + ": " + e.message, true);
				return;
			}
			await reload();
			say(verb.replace(/e?$/, "ed") + " " + what + ".");
		});
	}

	// --- roll ----------------------------------------------------------

	const rollDialog = $("#roll-dialog");
	let rolling = null; // the key the roll dialog is about

	function openRoll(k) {
		rolling = k;
		$("#roll-title").textContent = "Roll key " + k.name + " (" + k.tokenPrefix + "…)?";
		$("#roll-grace").value = "86400";
		rollDialog.showModal();
		$(".cancel", rollDialog).focus();
	}
	$("#roll-yes").addEventListener("click", async () => {
		const k = rolling;
		rolling = null;
		const graceSeconds = Number($("#roll-grace").value);
		rollDialog.close();
		if (!k) return;
		const what = "key " + k.name + " (" + k.tokenPrefix + "…)";
		let rolled;
		try {
			rolled = await api("POST", "webapi/keys/" + encodeURIComponent(k.id) + "/roll", { graceSeconds });
		} catch (e) {
			say("Could not roll " + what + ": " + e.message, true);
			return;
		}
		await loadKeys(k.service);
		say("Rolled key " + k.name + ", now " + rolled.tokenPrefix + "…" + (rolled.previousTokenExpiry ? "; the previous token works until " + new Date(rolled.previousTokenExpiry).toLocaleString() : "; the previous token no longer works") + ".");
		showToken(rolled, rolled.token);
	});

	// setEnabled switches key k off or on, reloads its table and says so.
	async function setEnabled(k, enabled) {
		const what = "key " + k.name + " (" + k.tokenPrefix + "…)";
		try {
			await api("PATCH", "webapi/keys/" + encodeURIComponent(k.id), { enabled });
		} catch (e) {
			say("Could not " + (enabled ? "enable " : "disable ") + what + ": " + e.message, true);
			return;
		}
		await loadKeys(k.service);
		say((enabled ? "Enabled " : "Disabled ") + what + ".");
	}

	function confirmDelete(k) {
		confirmRemoval("Delete", "key " + k.name + " (" + k.tokenPrefix + "…)",
			"Clients that use this key are refused from the moment it is deleted. This cannot be undone.",
			"webapi/keys/" + encodeURIComponent(k.id), () => loadKeys(k.service));
	}

	// --- templates -----------------------------------------------------

	const templatesPanel = $("#panel-templates");

	async function loadTemplates() {
		let templates;
		try {
			templates = await api("GET", "webapi/templates");
		} catch (e) {
			say("Could not load the templates: " + e.message, true);
			return;
		}
		const labels = ["ID", "Collection ID", "Title", "Body", "Actions"];
		$("tbody", templatesPanel).replaceChildren(...templates.map((t) => {
			const remove = el("button", { type: "button", className: "delete danger", textContent: "Remove" });
			remove.setAttribute("aria-label", "Remove " + t.id);
			remove.addEventListener("click", () => confirmRemoval("Remove", "template " + t.id,
				"Contracts already created from it keep their copy; no new contract can be created from it.",
				"webapi/templates/" + encodeURIComponent(t.id), loadTemplates));
			const cells = [
				el("th", { scope: "row", textContent: t.id }),
				el("td", { textContent: t.collectionId }),
				el("td", { textContent: t.title }),
				el("td", { className: "body-preview", textContent: t.body.length > 160 ? t.body.slice(0, 160) + "…" : t.body }),
				cell("td", { className: "row-actions" }, remove),
			];
			cells.forEach((c, i) => c.setAttribute("data-label", labels[i]));
			const row = el("tr", null, ...cells);
			row.dataset.id = t.id;
			return row;
		}));
		$(".empty", templatesPanel).hidden = templates.length > 0;
		$(".table-wrap", templatesPanel).hidden = templates.length === 0;
	}

	const templateDialog = $("#template-dialog");
	const templateForm = $("#template-form");
	$("#add-template").addEventListener("click", () => {
		clearErrors(templateForm);
		templateForm.reset();
		templateDialog.showModal();
		$("#t-id").focus();
	});
	templateForm.addEventListener("submit", (e) => {
		e.preventDefault();
		busy(templateForm, async () => {
			clearErrors(templateForm);
			const t = {
				id: $("#t-id").value.trim(),
				collectionId: $("#t-collectionId").value.trim(),
				title: $("#t-title").value.trim(),
				body: $("#t-body").value,
			};
			try {
				await api("POST", "webapi/templates", t);
			} catch (err) {
				if (err.problem && err.problem.code === "conflict") {
					// The admin API's advice names its own tools; here the
					// way out is on the page.
					err.problem.errors = [{ field: "id", message: "A template with this ID exists: remove it first, or choose another ID." }];
				}
				showErrors(templateForm, err, "t-", "te-", "template-form-error");
				return;
			}
			templateDialog.close();
			await loadTemplates();
			say("Added template " + t.id + ".");
		});
	});

	// --- start ---------------------------------------------------------

	$("#h-times").textContent = "In your time zone, " + timeZone + "; empty: no limit.";
	for (const h of $$(".zone")) h.textContent = "Times are in " + timeZone + ".";

	const first = tabs.find((t) => t.id === "tab-" + location.hash.slice(1)) || tabs[0];
	select(first, false);
})();
