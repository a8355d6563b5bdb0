// The Web API Keys page. It talks to the administration API through the
// gateway, at webapi/keys, webapi/consumers, webapi/plans and
// webapi/templates relative to the page, with the Keygate-Admin header
// that the gateway requires of every call.
// It builds every element with createElement and textContent: the
// Content-Security-Policy forbids HTML built from strings.
"use strict";

(() => {
	const base = new URL(".", location.origin + location.pathname); // no credentials from the address bar
	const $ = (sel, root = document) => root.querySelector(sel);
	const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

	// The privileges of each service, with the names docs/clients.md gives them.
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
	// labelled is a line of a cell: a muted label, then node.
	const labelled = (label, node) => el("div", null, el("span", { className: "muted", textContent: label + " " }), node);
	// nameCell is a row's heading: a name, with its description under it.
	const nameCell = (name, description, ...more) => cell("th", { scope: "row", className: "name" }, el("span", { className: "key-name", textContent: name }),
		...more, ...(description ? [el("span", { className: "description", textContent: description })] : []));
	// rowButton is a button of a row, named for a screen reader by what it
	// does and to what ("Edit browser key").
	function rowButton(label, cls, name, action) {
		const b = el("button", { type: "button", className: cls, textContent: label });
		b.setAttribute("aria-label", label + " " + name);
		b.addEventListener("click", (e) => {
			const row = b.closest("tr");
			actedFrom = { row, index: [...row.parentNode.children].indexOf(row), cls: b.classList[0] };
			action(e);
		});
		return b;
	}
	// actedFrom is the row button last clicked: its dialog returns focus
	// to it, but a save or delete then redraws the table and takes the
	// button away, so showRows puts focus on the same button of the
	// redrawn row, or the row now in its place, or the group's first
	// button (its Create button), rather than leave it on the page.
	let actedFrom = null;
	// showRows fills the table of group with a row of each item, or says
	// that there are none.
	function showRows(group, items, row) {
		const tbody = $("tbody", group);
		const from = actedFrom && tbody.contains(actedFrom.row) ? actedFrom : null;
		tbody.replaceChildren(...items.map(row));
		$(".empty", group).hidden = items.length > 0;
		$(".table-wrap", group).hidden = items.length === 0;
		if (!from || (document.activeElement && document.activeElement !== document.body)) return;
		actedFrom = null;
		const button = (r) => r && $("button." + CSS.escape(from.cls), r);
		const same = button($(`tr[data-id="${CSS.escape(from.row.dataset.id || "")}"]`, tbody));
		const next = button(tbody.children[Math.min(from.index, tbody.children.length - 1)]);
		const target = same || next || $("button:not([disabled])", group);
		if (target) target.focus();
	}
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
	// number reads a number field: null when empty, so that the gateway
	// names it as required.
	const number = (v) => (v.trim() === "" ? null : Number(v));
	// Counts are written as the page's language writes them (100,000).
	const numberFormat = new Intl.NumberFormat(document.documentElement.lang || undefined);
	const count = (n) => numberFormat.format(n);
	// duration writes a policy's window in its largest whole unit.
	function duration(seconds) {
		if (seconds % 3600 === 0) return seconds / 3600 + " h";
		if (seconds % 60 === 0) return seconds / 60 + " min";
		return seconds + " s";
	}
	// utcTime is a time shown in UTC, as the quota's periods and the usage
	// buckets are counted: "2026-12-01 00:00 UTC", broken only after the date.
	function utcTime(iso) {
		const [date, time] = new Date(iso).toISOString().slice(0, 16).split("T");
		return el("time", { dateTime: iso }, el("span", { className: "nowrap", textContent: date }), " ", el("span", { className: "nowrap", textContent: time + " UTC" }));
	}
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
	// A link, or the address bar, that changes the hash changes the tab
	// (select's own replaceState fires no hashchange).
	window.addEventListener("hashchange", () => {
		const tab = tabs.find((t) => t.id === "tab-" + location.hash.slice(1));
		if (tab && tab.getAttribute("aria-selected") !== "true") select(tab, false);
	});
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

	// load fills the panel of section, marked busy meanwhile: a screen
	// reader waits for it, and so can a test.
	const loads = new Map(); // the panels' loads under way
	async function load(section) {
		const panel = document.getElementById("panel-" + section);
		loads.set(panel, (loads.get(panel) || 0) + 1);
		panel.setAttribute("aria-busy", "true");
		try {
			if (section === "templates") await loadTemplates();
			else if (section === "consumers") await loadConsumers();
			else await loadKeys(section);
		} finally {
			loads.set(panel, loads.get(panel) - 1);
			if (loads.get(panel) === 0) panel.removeAttribute("aria-busy");
		}
	}

	// --- consumers and plans, as keys and consumers name them -----------

	// scopes holds the plans and consumers by id, oldest first, as they
	// were last loaded: the key tables and forms show their names.
	const scopes = { plans: new Map(), consumers: new Map() };
	async function loadScopes() {
		const [plans, consumers] = await Promise.all([api("GET", "webapi/plans"), api("GET", "webapi/consumers")]);
		scopes.plans = new Map(plans.map((p) => [p.id, p]));
		scopes.consumers = new Map(consumers.map((c) => [c.id, c]));
	}
	// consumerName names a consumer in a list: its name, and its external
	// ID when it has one (two consumers may share a name).
	const consumerName = (c) => (c.externalId ? c.name + " (" + c.externalId + ")" : c.name);

	// fillSelect offers "None" and each of items in select, current chosen;
	// an id that is not among them (gone meanwhile) stays, named by itself.
	// Items named alike (two consumers called ACME, neither with an
	// external ID) carry their ids too, so no two options read the same.
	function fillSelect(select, items, current, name) {
		const labels = items.map(name);
		const label = (l, i) => (labels.indexOf(l) === labels.lastIndexOf(l) ? l : l + ", id " + items[i].id);
		const options = [el("option", { value: "", textContent: "None" }), ...items.map((it, i) => el("option", { value: it.id, textContent: label(labels[i], i) }))];
		if (current && !items.some((i) => i.id === current)) options.push(el("option", { value: current, textContent: current }));
		select.replaceChildren(...options);
		select.value = current || "";
	}

	// --- keys ----------------------------------------------------------

	const keyColumns = (service) => [
		"Key Name", "Key Value", "Privileges", "Validity", "Allowed IPs", "Owner",
		...(service === "share" ? ["Admin projects"] : []),
		"Limits", "Activity", "Actions",
	];

	async function loadKeys(service) {
		const panel = document.getElementById("panel-" + service);
		let keys;
		try {
			// The plans and consumers too, for their names; without them
			// a key shows their ids.
			[keys] = await Promise.all([api("GET", "webapi/keys?service=" + service), loadScopes().catch(() => {})]);
		} catch (e) {
			say("Could not load the keys: " + e.message, true);
			return;
		}
		$("thead", panel).replaceChildren(el("tr", null, ...keyColumns(service).map((c) =>
			c === "Actions" ? el("th", { scope: "col" }, el("span", { className: "sr-only", textContent: c })) : el("th", { scope: "col", textContent: c }))));
		showRows(panel, keys, (k) => keyRow(service, k));
	}

	function keyRow(service, k) {
		const names = Object.fromEntries(privileges[service]);
		const labels = keyColumns(service);
		const limits = [];
		if (k.notValidBefore) limits.push(labelled("from", timeCell(k.notValidBefore)));
		if (k.notValidAfter) limits.push(labelled("until", timeCell(k.notValidAfter)));
		const validity = limits.length > 0 ? cell("td", { className: "validity" }, ...limits) : el("td", { textContent: "no limit" });
		const cells = [
			nameCell(k.name, k.description, ...(k.enabled === false ? [el("span", { className: "disabled-badge", textContent: "Disabled" })] : [])),
			cell("td", null, el("code", { className: "prefix", textContent: k.tokenPrefix + "…" })),
			cell("td", null, list(k.privileges.map((p) => names[p] || p), "none")),
			validity,
			cell("td", null, list(k.allowedIps, "any")),
			el("td", { textContent: k.owner }),
			...(service === "share" ? [cell("td", null, list(k.adminProjects, "none"))] : []),
			cell("td", { className: "limits" }, limitsList(k)),
			// Creation Time, Last Modification Time, Usage Count, Last Usage Time.
			cell("td", { className: "activity" },
				labelled("created", timeCell(k.creationTime, "")),
				labelled("modified", timeCell(k.lastModificationTime, "")),
				k.usageCount > 0
					? labelled("used " + (k.usageCount === 1 ? "once" : k.usageCount + " times") + ", last", timeCell(k.lastUsageTime, "never"))
					: el("div", { className: "muted", textContent: "never used" }),
				...(k.previousTokenExpiry ? [labelled("previous token until", timeCell(k.previousTokenExpiry, ""))] : [])),
		];
		const button = (label, cls, action) => rowButton(label, cls, k.name, action);
		cells.push(cell("td", { className: "row-actions" },
			button("Edit", "edit", () => openKeyForm(service, k)),
			button("Reveal", "reveal", () => reveal(k, false)),
			button("Download", "download", () => reveal(k, true)),
			button("Roll", "roll", () => openRoll(k)),
			button("Usage", "usage", () => openUsage(keySubject(k))),
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

	// limitsList shows what a key, a consumer or a plan is held to: its
	// own rate-limit policies ("burst: 20 / 1 s"), its plan's under the
	// plan's name, a key's consumer, and its quota (its own or its plan's)
	// with what is left of it and when that resets.
	const quotaLeft = { hour: "this hour", day: "today", month: "this month" };
	const quotaEach = { hour: "an hour", day: "a day", month: "a month" };
	const policyText = (p) => p.name + ": " + count(p.limit) + " / " + duration(p.windowSeconds);
	const quotaText = (q) => "quota: " + count(q.limit) + " " + (quotaEach[q.period] || "a " + q.period);
	function limitsList(h) {
		const items = (h.rateLimits || []).map((p) => el("li", { textContent: policyText(p) }));
		const plan = h.planId ? scopes.plans.get(h.planId) : null;
		if (h.planId) {
			const terms = plan ? [...(plan.rateLimits || []).map(policyText), ...(plan.quota ? [quotaText(plan.quota)] : [])] : [];
			items.push(el("li", { className: "plan" }, "plan ", el("strong", { textContent: plan ? plan.name : h.planId }), terms.length > 0 ? ": " + terms.join(", ") : ""));
		}
		if (h.consumerId) {
			const c = scopes.consumers.get(h.consumerId);
			items.push(el("li", { className: "consumer" }, "consumer ", el("strong", { textContent: c ? consumerName(c) : h.consumerId })));
		}
		const q = h.quota || (plan && plan.quota);
		if (q && h.quotaUsed != null) {
			items.push(el("li", { className: "quota" },
				"quota: " + count(Math.max(q.limit - h.quotaUsed, 0)) + " of " + count(q.limit) + " left " + (quotaLeft[q.period] || "this " + q.period),
				...(h.quotaResetsAt ? [", resets ", utcTime(h.quotaResetsAt)] : [])));
		} else if (h.quota) {
			items.push(el("li", { className: "quota", textContent: quotaText(h.quota) }));
		}
		return items.length > 0 ? el("ul", { className: "plain" }, ...items) : document.createTextNode("none");
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
		fillSelect($("#f-consumerId"), [...scopes.consumers.values()], key && key.consumerId, consumerName);
		fillSelect($("#f-planId"), [...scopes.plans.values()], key && key.planId, (p) => p.name);
		keyLimits.fill(key);
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
		v.consumerId = $("#f-consumerId").value || null;
		v.planId = $("#f-planId").value || null;
		return { ...v, ...keyLimits.read() };
	}

	// --- rate limits and quota in a form --------------------------------

	// A key's, a consumer's and a plan's form each hold a copy of
	// #limits-template, made by limitsEditor.
	const limitsTemplate = $("#limits-template");
	const maxPolicies = 4;
	const policyFields = [
		["name", "Name", { maxLength: 20, autocomplete: "off", spellcheck: false }],
		["limit", "Limit", { type: "number", min: "1", max: "1000000000", step: "1", inputMode: "numeric", autocomplete: "off" }],
		["windowSeconds", "Window (seconds)", { type: "number", min: "1", max: "86400", step: "1", inputMode: "numeric", autocomplete: "off" }],
	];

	// limitsEditor puts the rate-limit and quota fields into form's
	// .limits-fields, named as the form's other fields are: an input
	// inputPrefix + the field's path (f-quota-limit), its error box
	// errorPrefix + the path (e-quota-limit), as showErrors finds them.
	// It returns fill, which shows a holder's limits (null: none), and
	// read, which reads them as the API's fields.
	function limitsEditor(form, inputPrefix, errorPrefix) {
		const rename = (id) => (id.startsWith("e-") ? errorPrefix + id.slice(2) : id.startsWith("h-") ? "h-" + inputPrefix + id.slice(2) : inputPrefix + id);
		const part = limitsTemplate.content.cloneNode(true);
		for (const e of $$("[id]", part)) e.id = rename(e.id);
		for (const e of $$("label[for]", part)) e.htmlFor = rename(e.htmlFor);
		for (const e of $$("[aria-describedby]", part)) e.setAttribute("aria-describedby", e.getAttribute("aria-describedby").split(/\s+/).map(rename).join(" "));
		$(".limits-fields", form).replaceChildren(part);
		const policies = $(".policies", form);
		const addPolicy = $(".add-policy", form);
		const period = $("#" + inputPrefix + "quota-period", form);
		const limit = $("#" + inputPrefix + "quota-limit", form);

		// policyRow is one rate-limit policy's fields, filled from p (a
		// policy of the holder) or empty; renumberPolicies gives it its ids.
		function policyRow(p) {
			const row = el("fieldset", { className: "policy" }, el("legend"));
			for (const [field, label, props] of policyFields) {
				const input = el("input", { ...props, value: p ? String(p[field]) : "" });
				input.dataset.field = field;
				row.append(el("div", { className: "field" }, el("label", { textContent: label }), input, el("p", { className: "error", hidden: true })));
			}
			const remove = el("button", { type: "button", className: "remove-policy", textContent: "Remove" });
			remove.addEventListener("click", () => {
				const next = row.nextElementSibling;
				row.remove();
				renumberPolicies();
				(next ? $(".remove-policy", next) : addPolicy).focus();
			});
			row.append(remove);
			return row;
		}

		// renumberPolicies names each policy's fields after its place in
		// the list, as the gateway names them in its errors:
		// f-rateLimits-1-limit and e-rateLimits-1-limit for
		// rateLimits[1].limit in the key form.
		function renumberPolicies() {
			const rows = $$(".policy", policies);
			rows.forEach((row, i) => {
				$("legend", row).textContent = "Policy " + (i + 1);
				for (const f of $$(".field", row)) {
					const input = $("input", f);
					const id = "rateLimits-" + i + "-" + input.dataset.field;
					input.id = inputPrefix + id;
					$("label", f).htmlFor = input.id;
					$(".error", f).id = errorPrefix + id;
					input.setAttribute("aria-describedby", errorPrefix + id);
				}
				$(".remove-policy", row).setAttribute("aria-label", "Remove policy " + (i + 1));
			});
			addPolicy.disabled = rows.length >= maxPolicies;
			addPolicy.textContent = rows.length >= maxPolicies ? "Add policy (at most " + maxPolicies + ")" : "Add policy";
		}
		addPolicy.addEventListener("click", () => {
			if ($$(".policy", policies).length >= maxPolicies) return;
			const row = policyRow(null);
			policies.append(row);
			renumberPolicies();
			$("input", row).focus();
		});

		// Without a period there is no quota, and so no limit to give.
		function periodChanged() {
			limit.disabled = period.value === "";
			if (limit.disabled) limit.value = "";
		}
		period.addEventListener("change", periodChanged);

		return {
			fill(h) {
				policies.replaceChildren(...((h && h.rateLimits) || []).map(policyRow));
				renumberPolicies();
				period.value = h && h.quota ? h.quota.period : "";
				limit.value = h && h.quota ? String(h.quota.limit) : "";
				periodChanged();
			},
			read: () => ({
				rateLimits: $$(".policy", policies).map((row) => ({
					name: $('[data-field="name"]', row).value.trim(),
					limit: number($('[data-field="limit"]', row).value),
					windowSeconds: number($('[data-field="windowSeconds"]', row).value),
				})),
				quota: period.value ? { limit: number(limit.value), period: period.value } : null,
			}),
		};
	}
	const keyLimits = limitsEditor(keyForm, "f-", "e-");

	// changes is what of values differs from before, what the form showed
	// read back as a submit reads it: an edit sends only that, so that a
	// time shown to the second does not overwrite a fraction set through
	// the API, nor the form's line endings a description's.
	function changes(values, before) {
		const patch = {};
		for (const [f, v] of Object.entries(values)) {
			if (JSON.stringify(v) !== JSON.stringify(before[f])) patch[f] = v;
		}
		return patch;
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
					saved = await api("PATCH", "webapi/keys/" + encodeURIComponent(key.id), changes(values, before));
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
	// (the field itself when it has a box, else the one named before any
	// [index] or .); the rest go above the form.
	function showErrors(form, err, inputPrefix, errorPrefix, generalId) {
		const general = document.getElementById(generalId);
		const p = err.problem;
		const rest = [];
		for (const fe of (p && p.errors) || []) {
			// rateLimits[1].limit has a box of its own (e-rateLimits-1-limit);
			// privileges[1] is told beside privileges.
			const exact = fe.field.replace(/\[(\d+)\]/g, "-$1").replace(/\./g, "-");
			const field = document.getElementById(errorPrefix + exact) ? exact : fe.field.split(/[[.]/)[0];
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
		// Focus on the first field in error: a group's first control (a
		// fieldset takes no focus), else the message of the form itself,
		// since the submit button, disabled while the form was sent, lost it.
		const first = $('[aria-invalid="true"]', form);
		const target = first && first.matches("fieldset") ? $("input:not([disabled]), select:not([disabled]), textarea:not([disabled]), button:not([disabled])", first) : first;
		if (target) {
			target.focus();
		} else if (!general.hidden) {
			general.tabIndex = -1;
			general.focus();
		}
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

	// --- usage ---------------------------------------------------------

	// A key's or a consumer's requests over time, let through and refused,
	// from webapi/keys/{id}/usage or webapi/consumers/{id}/usage: the last
	// 30 days by day or the last 48 hours by hour, as a bar chart drawn
	// here in SVG (no library: the page loads nothing else), a summary line
	// and the numbers as a table. For a consumer the dialog shows its keys
	// too.
	const usageDialog = $("#usage-dialog");
	const usageSpans = {
		day: { text: "the last 30 days", when: "Day (UTC)", every: [1, 2, 5, 7, 10, 15] },
		hour: { text: "the last 48 hours", when: "Hour (UTC)", every: [1, 2, 3, 6, 12, 24] },
	};
	// What a refused request was refused for, as the gateway's codes say.
	const refusals = {
		rate_limited: "rate limited", quota_exceeded: "quota exceeded", unavailable: "quota unavailable",
		key_disabled: "key disabled", key_not_valid: "key not valid", ip_not_allowed: "IP not allowed",
		not_found: "no such resource", method_not_allowed: "method not allowed", missing_privilege: "missing privilege",
	};
	const dayLabel = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
	const hourLabel = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: "UTC" });
	let usage = null; // { subject, resolution, series, asked } of the dialog

	// What the dialog is about: the holder (a key or a consumer), what
	// names it ("key ci"), the API path of it and the dialog's title.
	const keySubject = (k) => ({ holder: k, what: "key " + k.name, path: "webapi/keys/" + encodeURIComponent(k.id), title: "Usage of key " + k.name });
	const consumerSubject = (c) => ({ holder: c, what: "consumer " + c.name, path: "webapi/consumers/" + encodeURIComponent(c.id), title: "Consumer " + c.name, consumer: true });

	function openUsage(subject) {
		usage = { subject, resolution: "day", series: null, asked: 0 };
		$("#usage-title").textContent = subject.title;
		const limits = limitsList(subject.holder);
		$("#usage-limits").replaceChildren(el("span", { className: "muted", textContent: "Limits: " }), limits.nodeType === Node.TEXT_NODE ? el("span", null, limits) : limits);
		const keys = $("#usage-keys");
		keys.hidden = $("#usage-requests-title").hidden = !subject.consumer;
		$("tbody", keys).replaceChildren();
		$(".empty", keys).hidden = true;
		$(".table-wrap", keys).hidden = true;
		$(".usage-data", usageDialog).open = false;
		usageDialog.showModal();
		$("#usage-done").focus();
		if (subject.consumer) loadConsumerKeys(usage);
		loadUsage("day");
	}

	// loadConsumerKeys lists the keys of the consumer of u in the dialog.
	async function loadConsumerKeys(u) {
		const c = u.subject.holder;
		const section = $("#usage-keys");
		let keys;
		try {
			keys = await api("GET", "webapi/keys?consumerId=" + encodeURIComponent(c.id));
		} catch (e) {
			if (usage !== u) return;
			const error = $(".empty", section);
			error.textContent = "Could not load the keys of consumer " + c.name + ": " + e.message;
			error.hidden = false;
			return;
		}
		if (usage !== u) return; // the dialog closed, or shows another consumer
		$("caption", section).textContent = "Keys of consumer " + c.name;
		$(".empty", section).textContent = "No keys yet: choose this consumer on a key's form.";
		const labels = ["Key Name", "Service", "Key Value", "Activity"];
		showRows(section, keys, (k) => {
			const cells = [
				nameCell(k.name, "", ...(k.enabled === false ? [el("span", { className: "disabled-badge", textContent: "Disabled" })] : [])),
				el("td", { textContent: k.service }),
				cell("td", null, el("code", { className: "prefix", textContent: k.tokenPrefix + "…" })),
				k.usageCount > 0
					? cell("td", null, labelled("used " + (k.usageCount === 1 ? "once" : count(k.usageCount) + " times") + ", last", timeCell(k.lastUsageTime, "never")))
					: el("td", { className: "muted", textContent: "never used" }),
			];
			cells.forEach((c, i) => c.setAttribute("data-label", labels[i]));
			const row = el("tr", null, ...cells);
			row.dataset.id = k.id;
			return row;
		});
	}

	async function loadUsage(resolution) {
		const u = usage;
		if (!u) return;
		u.resolution = resolution;
		const asked = ++u.asked;
		for (const b of $$("[data-resolution]", usageDialog)) b.setAttribute("aria-pressed", String(b.dataset.resolution === resolution));
		const error = $("#usage-error");
		error.hidden = true;
		$("#usage-figure").setAttribute("aria-busy", "true");
		let series;
		try {
			series = await api("GET", u.subject.path + "/usage?resolution=" + resolution);
		} catch (e) {
			if (usage !== u || asked !== u.asked) return;
			$("#usage-figure").removeAttribute("aria-busy");
			error.textContent = "Could not load the usage of " + u.subject.what + ": " + e.message;
			error.hidden = false;
			return;
		}
		if (usage !== u || asked !== u.asked) return; // another span was asked for meanwhile
		u.series = series;
		$("#usage-figure").removeAttribute("aria-busy");
		showUsage(u);
	}
	for (const b of $$("[data-resolution]", usageDialog)) b.addEventListener("click", () => loadUsage(b.dataset.resolution));
	usageDialog.addEventListener("close", () => { usage = null; });
	// The chart is drawn to the dialog's width, so that its text stays
	// readable on a phone: again when the window changes.
	window.addEventListener("resize", () => {
		if (usage && usage.series) drawUsage(usage);
	});

	const refusedOf = (b) => Object.values(b.refused || {}).reduce((a, n) => a + n, 0);
	// reasons writes refusals by reason: "3 rate limited, 1 quota exceeded".
	const reasons = (byReason) => Object.entries(byReason || {}).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1])
		.map(([r, n]) => count(n) + " " + (refusals[r] || r.replace(/_/g, " "))).join(", ");
	const bucketName = (resolution, iso) => new Date(iso).toISOString().slice(0, resolution === "day" ? 10 : 16).replace("T", " ");

	function showUsage(u) {
		const { series, subject } = u;
		const span = usageSpans[series.resolution] || usageSpans.day;
		let ok = 0, refused = 0;
		const byReason = {};
		for (const b of series.buckets) {
			ok += b.ok;
			for (const [r, n] of Object.entries(b.refused || {})) {
				refused += n;
				byReason[r] = (byReason[r] || 0) + n;
			}
		}
		const total = ok + refused;
		$("#usage-summary").textContent = count(total) + (total === 1 ? " request" : " requests") + " in " + span.text +
			(refused > 0 ? ", " + count(refused) + " refused (" + reasons(byReason) + ")." : ", none refused.");
		drawUsage(u);
		// The same numbers as a table, for a screen reader and for anyone
		// who wants the exact counts.
		const table = $("#usage-table");
		$("caption", table).textContent = "Requests of " + subject.what + " in " + span.text + ", by " + series.resolution + " (UTC)";
		$("#usage-when").textContent = span.when;
		$("tbody", table).replaceChildren(...series.buckets.map((b) => el("tr", null,
			el("th", { scope: "row" }, el("time", { dateTime: b.start, textContent: bucketName(series.resolution, b.start) })),
			el("td", { className: "num", textContent: count(b.ok) }),
			el("td", { className: "num", textContent: count(refusedOf(b)) }),
			el("td", { textContent: reasons(b.refused) }))));
	}

	// svg makes an SVG element with attributes attrs and children.
	const svgNS = "http://www.w3.org/2000/svg";
	function svg(tag, attrs, ...children) {
		const e = document.createElementNS(svgNS, tag);
		for (const [name, v] of Object.entries(attrs || {})) e.setAttribute(name, String(v));
		for (const c of children) e.append(c);
		return e;
	}

	// niceStep is the step of the count axis: 1, 2 or 5 times a power of
	// ten, whole, at least raw.
	function niceStep(raw) {
		if (raw <= 1) return 1;
		const p = 10 ** Math.floor(Math.log10(raw));
		return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
	}

	// drawUsage draws the series of u as stacked bars, let through below
	// and refused above, with the counts on the left and the days or
	// hours below.
	function drawUsage(u) {
		const { series, subject } = u;
		const span = usageSpans[series.resolution] || usageSpans.day;
		const box = $("#usage-chart");
		const width = Math.max(Math.round(box.clientWidth) || 600, 280);
		const buckets = series.buckets;
		const max = Math.max(0, ...buckets.map((b) => b.ok + refusedOf(b)));
		const step = niceStep(max / 4);
		const yMax = Math.max(step, Math.ceil(max / step) * step);
		// Room on the left for the axis title and the longest count.
		const height = 220, left = 30 + 7 * count(yMax).length, right = 20, top = 12, bottom = 44;
		const plotW = width - left - right, plotH = height - top - bottom;
		const y = (v) => top + plotH - (v / yMax) * plotH;
		const slot = plotW / Math.max(buckets.length, 1);
		const barW = Math.max(slot * 0.7, 1);

		const chart = svg("svg", { class: "usage", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-labelledby": "usage-chart-title usage-summary" },
			svg("title", { id: "usage-chart-title" }, "Requests of " + subject.what + " in " + span.text + ", by " + series.resolution));
		for (let v = 0; v <= yMax; v += step) {
			chart.append(
				svg("line", { class: v === 0 ? "axis" : "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }),
				svg("text", { class: "tick", x: left - 6, y: y(v), "text-anchor": "end", "dominant-baseline": "middle" }, count(v)));
		}
		// A label every few buckets, as many as fit, on round hours or days.
		const fit = Math.max(Math.floor(plotW / 60), 1);
		const every = span.every.find((n) => buckets.length / n <= fit) || span.every[span.every.length - 1];
		buckets.forEach((b, i) => {
			const x = left + i * slot + (slot - barW) / 2;
			const start = new Date(b.start);
			const r = refusedOf(b);
			if (b.ok + r > 0) {
				const g = svg("g", { class: "bucket" }, svg("title", null, bucketName(series.resolution, b.start) + " UTC: " + count(b.ok) + " let through" +
					(r > 0 ? ", " + count(r) + " refused (" + reasons(b.refused) + ")" : "")));
				// At least a pixel, so that a small count still shows.
				const bar = (cls, from, to) => g.append(svg("rect", { class: cls, x, width: barW, y: Math.min(y(to), y(from) - 1), height: Math.max(y(from) - y(to), 1) }));
				if (b.ok > 0) bar("bar-ok", 0, b.ok);
				if (r > 0) bar("bar-refused", b.ok, b.ok + r);
				chart.append(g);
			}
			const at = series.resolution === "day" ? Math.round((start - new Date(buckets[0].start)) / 86400000) : start.getUTCHours();
			if (at % every === 0) {
				const label = series.resolution === "day" || start.getUTCHours() === 0 ? dayLabel.format(start) : hourLabel.format(start);
				chart.append(
					svg("line", { class: "axis", x1: x + barW / 2, x2: x + barW / 2, y1: y(0), y2: y(0) + 4 }),
					svg("text", { class: "tick", x: x + barW / 2, y: y(0) + 16, "text-anchor": "middle" }, label));
			}
		});
		chart.append(svg("text", { class: "axis-title", x: left + plotW / 2, y: height - 6, "text-anchor": "middle" }, span.when));
		chart.append(svg("text", { class: "axis-title", x: 0, y: 0, transform: `translate(12 ${top + plotH / 2}) rotate(-90)`, "text-anchor": "middle" }, "Requests"));
		box.replaceChildren(chart);
	}

	// --- consumers and plans ---------------------------------------------

	// The Consumers tab: the consumers, each with its limits, what is
	// left of its quota and how many keys it holds, and the plans below.
	const consumerGroup = $("#consumers");
	const planGroup = $("#plans");

	async function loadConsumers() {
		try {
			await loadScopes();
		} catch (e) {
			say("Could not load the consumers and plans: " + e.message, true);
			return;
		}
		showRows(consumerGroup, [...scopes.consumers.values()], consumerRow);
		showRows(planGroup, [...scopes.plans.values()], planRow);
	}

	function consumerRow(c) {
		const labels = ["Name", "External ID", "Limits", "Keys", "Activity", "Actions"];
		const button = (label, cls, action) => rowButton(label, cls, "consumer " + c.name, action);
		const cells = [
			nameCell(c.name, c.description),
			c.externalId ? cell("td", null, el("code", { textContent: c.externalId })) : el("td", { className: "muted", textContent: "none" }),
			cell("td", { className: "limits" }, limitsList(c)),
			el("td", { className: "key-count", textContent: c.keyCount === 0 ? "none" : c.keyCount === 1 ? "1 key" : count(c.keyCount) + " keys" }),
			cell("td", { className: "activity" },
				labelled("created", timeCell(c.creationTime, "")),
				labelled("modified", timeCell(c.lastModificationTime, ""))),
			cell("td", { className: "row-actions" },
				button("Details", "details", () => openUsage(consumerSubject(c))),
				button("Edit", "edit", () => openConsumerForm(c)),
				button("Delete", "delete danger", () => confirmRemoval("Delete", "consumer " + c.name,
					"Its limits stop binding its keys. A consumer that still holds keys is not deleted: give them another consumer, or none, first.",
					"webapi/consumers/" + encodeURIComponent(c.id), loadConsumers))),
		];
		cells.forEach((x, i) => x.setAttribute("data-label", labels[i]));
		const row = el("tr", null, ...cells);
		row.dataset.id = c.id;
		return row;
	}

	function planRow(p) {
		const labels = ["Name", "Limits", "Actions"];
		const button = (label, cls, action) => rowButton(label, cls, "plan " + p.name, action);
		const cells = [
			nameCell(p.name, p.description),
			cell("td", { className: "limits" }, limitsList(p)),
			cell("td", { className: "row-actions" },
				button("Edit", "edit", () => openPlanForm(p)),
				button("Delete", "delete danger", () => confirmRemoval("Delete", "plan " + p.name,
					"A plan that keys or consumers still take is not deleted: give them another plan, or none, first.",
					"webapi/plans/" + encodeURIComponent(p.id), loadConsumers))),
		];
		cells.forEach((x, i) => x.setAttribute("data-label", labels[i]));
		const row = el("tr", null, ...cells);
		row.dataset.id = p.id;
		return row;
	}

	// scopeForm makes the form of a consumer or a plan (noun) in dialog,
	// saved at path: fill shows an item's fields other than its limits
	// (null: a new one), read reads them back as the API's fields. It
	// returns the function that opens the form for an item, or for a new
	// one.
	function scopeForm({ noun, path, dialog, inputPrefix, errorPrefix, fill, read }) {
		const form = $("form", dialog);
		const limits = limitsEditor(form, inputPrefix, errorPrefix);
		const values = () => ({ ...read(), ...limits.read() });
		let editing = null; // { item, before } of the dialog
		form.addEventListener("submit", (e) => {
			e.preventDefault();
			busy(form, async () => {
				const { item, before } = editing;
				const v = values();
				clearErrors(form);
				let saved;
				try {
					saved = item
						? await api("PATCH", path + "/" + encodeURIComponent(item.id), changes(v, before))
						: await api("POST", path, v);
				} catch (err) {
					showErrors(form, err, inputPrefix, errorPrefix, $(".form-error", form).id);
					return;
				}
				dialog.close();
				await loadConsumers();
				say((item ? "Saved " : "Created ") + noun + " " + saved.name + ".");
			});
		});
		return (item) => {
			clearErrors(form);
			form.reset();
			fill(item);
			limits.fill(item);
			$("h2", dialog).textContent = item ? "Edit " + noun + " " + item.name : "Create " + noun;
			$('[type="submit"]', form).textContent = item ? "Save" : "Create " + noun;
			editing = { item, before: values() };
			dialog.showModal();
			$("input", form).focus();
		};
	}

	const openConsumerForm = scopeForm({
		noun: "consumer", path: "webapi/consumers", dialog: $("#consumer-dialog"), inputPrefix: "c-", errorPrefix: "ce-",
		fill(c) {
			$("#c-name").value = c ? c.name : "";
			$("#c-externalId").value = (c && c.externalId) || "";
			$("#c-description").value = c ? c.description : "";
			fillSelect($("#c-planId"), [...scopes.plans.values()], c && c.planId, (p) => p.name);
		},
		read: () => ({
			name: $("#c-name").value.trim(),
			externalId: $("#c-externalId").value.trim() || null,
			description: $("#c-description").value,
			planId: $("#c-planId").value || null,
		}),
	});
	$("#create-consumer").addEventListener("click", () => openConsumerForm(null));

	const openPlanForm = scopeForm({
		noun: "plan", path: "webapi/plans", dialog: $("#plan-dialog"), inputPrefix: "pl-", errorPrefix: "ple-",
		fill(p) {
			$("#pl-name").value = p ? p.name : "";
			$("#pl-description").value = p ? p.description : "";
		},
		read: () => ({ name: $("#pl-name").value.trim(), description: $("#pl-description").value }),
	});
	$("#create-plan").addEventListener("click", () => openPlanForm(null));

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
		showRows(templatesPanel, templates, (t) => {
			const remove = rowButton("Remove", "delete danger", t.id, () => confirmRemoval("Remove", "template " + t.id,
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
		});
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
