"""sarif_check.py FILE... — checks SARIF 2.1.0 logs against the structure the
OASIS schema (sarif-schema-2.1.0.json) requires, for the objects dtpc writes.

The test machines have no network and no JSON-Schema package, so the schema's
rules are restated here in the standard library: required properties, enums,
types and minimums, and closed property sets (the schema's objects have
"additionalProperties": false; the names below are the schema's own). Also
checked, beyond the schema: ruleIndex points at the rule named by ruleId,
relatedLocations ids are unique, regions do not end before they start, and
every result of dtpc has a rule (--rules). Exit 1 with the first violation;
with --each, every file is checked and has a line, "FILE: ok" or "FILE: " and
its first violation (one start of Python for the test suite's hundreds of
logs), and the exit is 1 when any file has a violation.
"""
import json
import sys

PROPS = {
    "log": "$schema version runs inlineExternalProperties properties",
    "run": "tool invocations conversion language versionControlProvenance originalUriBaseIds"
           " artifacts logicalLocations graphs results automationDetails runAggregates"
           " baselineGuid redactionTokens defaultEncoding defaultSourceLanguage"
           " newlineSequences columnKind externalPropertyFileReferences threadFlowLocations"
           " taxonomies addresses translations policies webRequests webResponses"
           " specialLocations properties",
    "tool": "driver extensions properties",
    "toolComponent": "guid name organization product productSuite shortDescription"
                     " fullDescription fullName version semanticVersion dottedQuadFileVersion"
                     " releaseDateUtc downloadUri informationUri globalMessageStrings"
                     " notifications rules taxa locations language contents isComprehensive"
                     " localizedDataSemanticVersion minimumRequiredLocalizedDataSemanticVersion"
                     " associatedComponent translationMetadata supportedTaxonomies properties",
    "reportingDescriptor": "id deprecatedIds guid deprecatedGuids name deprecatedNames"
                           " shortDescription fullDescription messageStrings"
                           " defaultConfiguration helpUri help relationships properties",
    "reportingConfiguration": "enabled level rank parameters properties",
    "multiformatMessageString": "text markdown properties",
    "message": "text markdown id arguments properties",
    "invocation": "commandLine arguments responseFiles startTimeUtc endTimeUtc exitCode"
                  " ruleConfigurationOverrides notificationConfigurationOverrides"
                  " toolExecutionNotifications toolConfigurationNotifications"
                  " exitCodeDescription exitSignalName exitSignalNumber"
                  " processStartFailureMessage executionSuccessful machine account processId"
                  " executableLocation workingDirectory environmentVariables stdin stdout"
                  " stderr stdoutStderr properties",
    "notification": "locations message level threadId timeUtc exception descriptor"
                    " associatedRule properties",
    "result": "ruleId ruleIndex rule kind level message analysisTarget locations guid"
              " correlationGuid occurrenceCount partialFingerprints fingerprints stacks"
              " codeFlows graphs graphTraversals relatedLocations suppressions baselineState"
              " rank attachments hostedViewerUri workItemUris provenance fixes taxa"
              " webRequest webResponse properties",
    "location": "id physicalLocation logicalLocations message annotations relationships"
                " properties",
    "physicalLocation": "address artifactLocation region contextRegion properties",
    "artifactLocation": "uri uriBaseId index description properties",
    "region": "startLine startColumn endLine endColumn charOffset charLength byteOffset"
              " byteLength snippet message sourceLanguage properties",
}
LEVELS = {"none", "note", "warning", "error"}


class Bad(Exception):
    pass


def need(cond, path, why):
    if not cond:
        raise Bad(f"{path}: {why}")


def obj(v, kind, path, required=()):
    need(isinstance(v, dict), path, f"a {kind} must be an object")
    extra = set(v) - set(PROPS[kind].split())
    need(not extra, path, f"{kind} has no property {sorted(extra)}")
    for r in required:
        need(r in v, path, f"{kind} requires '{r}'")


def string(v, path):
    need(isinstance(v, str), path, "must be a string")


def integer(v, path, least):
    need(isinstance(v, int) and not isinstance(v, bool) and v >= least, path,
         f"must be an integer >= {least}")


def message(v, path, kind="message"):
    obj(v, kind, path)
    if kind == "multiformatMessageString":
        need("text" in v, path, "requires 'text'")
    else:
        need("text" in v or "id" in v, path, "a message requires 'text' or 'id'")
    if "text" in v:
        string(v["text"], path + ".text")


def region(v, path):
    obj(v, "region", path)
    for k in ("startLine", "startColumn", "endLine", "endColumn"):
        if k in v:
            integer(v[k], f"{path}.{k}", 1)
    need("startLine" in v or "charOffset" in v or "byteOffset" in v, path,
         "a region needs startLine, charOffset or byteOffset")
    if "endLine" in v:
        need(v["endLine"] >= v["startLine"], path, "endLine before startLine")
        if v["endLine"] == v["startLine"] and "endColumn" in v:
            need(v["endColumn"] >= v.get("startColumn", 1), path, "endColumn before startColumn")


def location(v, path):
    obj(v, "location", path)
    if "id" in v:
        integer(v["id"], path + ".id", -1)
    if "message" in v:
        message(v["message"], path + ".message")
    if "physicalLocation" in v:
        p = v["physicalLocation"]
        pp = path + ".physicalLocation"
        obj(p, "physicalLocation", pp)
        need("address" in p or "artifactLocation" in p, pp,
             "requires 'address' or 'artifactLocation'")
        if "artifactLocation" in p:
            a = p["artifactLocation"]
            obj(a, "artifactLocation", pp + ".artifactLocation")
            if "uri" in a:
                string(a["uri"], pp + ".artifactLocation.uri")
                need(" " not in a["uri"], pp + ".artifactLocation.uri", "a URI has no spaces")
        if "region" in p:
            region(p["region"], pp + ".region")


def check(log, want_rules):
    obj(log, "log", "$", required=("version", "runs"))
    need(log["version"] == "2.1.0", "$.version", "must be \"2.1.0\"")
    need(isinstance(log["runs"], list), "$.runs", "must be an array")
    for i, run in enumerate(log["runs"]):
        rp = f"$.runs[{i}]"
        obj(run, "run", rp, required=("tool",))
        obj(run["tool"], "tool", rp + ".tool", required=("driver",))
        drv = run["tool"]["driver"]
        dp = rp + ".tool.driver"
        obj(drv, "toolComponent", dp, required=("name",))
        string(drv["name"], dp + ".name")
        rules = drv.get("rules", [])
        ids = []
        for k, r in enumerate(rules):
            p = f"{dp}.rules[{k}]"
            obj(r, "reportingDescriptor", p, required=("id",))
            string(r["id"], p + ".id")
            ids.append(r["id"])
            for m in ("shortDescription", "fullDescription", "help"):
                if m in r:
                    message(r[m], f"{p}.{m}", "multiformatMessageString")
            if "defaultConfiguration" in r:
                c = r["defaultConfiguration"]
                obj(c, "reportingConfiguration", p + ".defaultConfiguration")
                need(c.get("level", "warning") in LEVELS, p, "bad level")
        need(len(set(ids)) == len(ids), dp + ".rules", "rule ids repeat")
        if "columnKind" in run:
            need(run["columnKind"] in ("utf16CodeUnits", "unicodeCodePoints"), rp,
                 "bad columnKind")
        for k, inv in enumerate(run.get("invocations", [])):
            p = f"{rp}.invocations[{k}]"
            obj(inv, "invocation", p, required=("executionSuccessful",))
            need(isinstance(inv["executionSuccessful"], bool), p, "executionSuccessful is boolean")
            for j, n in enumerate(inv.get("toolExecutionNotifications", [])):
                obj(n, "notification", f"{p}.toolExecutionNotifications[{j}]",
                    required=("message",))
                message(n["message"], f"{p}.toolExecutionNotifications[{j}].message")
        for k, res in enumerate(run.get("results", [])):
            p = f"{rp}.results[{k}]"
            obj(res, "result", p, required=("message",))
            message(res["message"], p + ".message")
            need(res.get("level", "warning") in LEVELS, p, "bad level")
            if "ruleIndex" in res:
                integer(res["ruleIndex"], p + ".ruleIndex", -1)
                need(res["ruleIndex"] < len(ids) and ids[res["ruleIndex"]] == res.get("ruleId"),
                     p, "ruleIndex does not point at ruleId's rule")
            if want_rules and res.get("level") == "error":
                need(res.get("ruleId") in ids, p, "an error without a rule")
            for j, loc in enumerate(res.get("locations", [])):
                location(loc, f"{p}.locations[{j}]")
            rel = res.get("relatedLocations", [])
            for j, loc in enumerate(rel):
                location(loc, f"{p}.relatedLocations[{j}]")
            rids = [loc["id"] for loc in rel if "id" in loc]
            need(len(set(rids)) == len(rids), p + ".relatedLocations", "ids repeat")


def main():
    args = sys.argv[1:]
    want_rules = "--rules" in args
    each = "--each" in args
    status = 0
    for f in (a for a in args if a not in ("--rules", "--each")):
        try:
            with open(f) as fh:
                check(json.load(fh), want_rules)
        except (Bad, ValueError) as e:
            print(f"{f}: {e}")
            if not each:
                sys.exit(1)
            status = 1
        else:
            if each:
                print(f"{f}: ok")
    sys.exit(status)


main()
